//! The schema of chat.sqlite3, one migration per step (`PRAGMA user_version`).

pub const MIGRATIONS: &[&str] = &[
    r#"
-- Rows are ordered by rowid: a new row always gets a larger one than every row present.
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    model TEXT NOT NULL,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'idle',
    permission_mode TEXT NOT NULL DEFAULT 'ask',
    settings TEXT NOT NULL DEFAULT '{}',
    -- the leaf of the active path: the transcript is head and its ancestors
    head_id TEXT,
    origin TEXT NOT NULL DEFAULT 'user',
    -- unix seconds when moved to the trash
    deleted_at INTEGER,
    -- the last event's seq: kept here so it never goes back when old events are dropped
    last_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX conversations_updated ON conversations(updated DESC, id DESC);

CREATE TABLE messages (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id TEXT,
    role TEXT NOT NULL,
    text TEXT NOT NULL DEFAULT '',
    reasoning TEXT,
    tool_calls TEXT,
    tool_call_id TEXT,
    run_id TEXT,
    status TEXT,
    created TEXT NOT NULL
);
CREATE INDEX messages_conversation ON messages(conversation_id);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    status TEXT NOT NULL,
    mode TEXT NOT NULL,
    model TEXT NOT NULL,
    origin TEXT NOT NULL,
    -- the assistant message this run writes (the last one, for several steps)
    message_id TEXT,
    steps INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    started TEXT NOT NULL,
    ended TEXT,
    usage TEXT
);
CREATE INDEX runs_conversation ON runs(conversation_id);
CREATE INDEX runs_status ON runs(status);

CREATE TABLE pending (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'waiting',
    created TEXT NOT NULL
);
CREATE INDEX pending_conversation ON pending(conversation_id, state);

CREATE TABLE events (
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    created INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) WITHOUT ROWID;

CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"#,
    r#"
-- The agent: consent cards (one per tool call that asked), permission rules,
-- and where a compaction's kept turns begin.
CREATE TABLE consents (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    run_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    summary TEXT NOT NULL,
    reason TEXT NOT NULL,
    choices TEXT NOT NULL,
    -- once | always | deny; NULL while nobody answered
    decision TEXT,
    created TEXT NOT NULL,
    answered TEXT
);
CREATE UNIQUE INDEX consents_call ON consents(conversation_id, run_id, call_id);

CREATE TABLE rules (
    id TEXT PRIMARY KEY,
    -- NULL: every chat
    conversation_id TEXT REFERENCES conversations(id) ON DELETE CASCADE,
    tool TEXT NOT NULL,
    pattern TEXT NOT NULL,
    verdict TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE INDEX rules_conversation ON rules(conversation_id);

-- On a `compacted` message: the first message kept after the summary.
ALTER TABLE messages ADD COLUMN keep_from TEXT;
"#,
    r#"
-- The files sent with a user message: [{path, bytes, mime, kind, inline?, image?}].
ALTER TABLE messages ADD COLUMN attachments TEXT;
"#,
    r#"
-- The files sent with a message that waits for the model, carried over on delivery.
ALTER TABLE pending ADD COLUMN attachments TEXT;
"#,
    r#"
-- The inbox: what triggerd, connectord and chatd tell the box's person.
-- Newest first is by rowid; created_unix keeps the 90-day bound cheap.
CREATE TABLE notifications (
    id TEXT PRIMARY KEY,
    -- run_ended | run_failed | needs_attention
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL DEFAULT '',
    -- trigger | connector | chatd
    source_type TEXT NOT NULL,
    source_id TEXT NOT NULL,
    source_name TEXT NOT NULL DEFAULT '',
    conversation_id TEXT,
    created TEXT NOT NULL,
    created_unix INTEGER NOT NULL,
    read INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX notifications_created ON notifications(created_unix);
CREATE INDEX notifications_unread ON notifications(read);
"#,
    r#"
-- Where a chat's files are: own (workspaces/<chat>/) or shared (the box's
-- shared folder, [chatd] shared_workspace).
ALTER TABLE conversations ADD COLUMN workspace TEXT NOT NULL DEFAULT 'own';
"#,
    r#"
-- A notification's idempotency key: a second post with the same key stores
-- nothing. NULL (no key) is never unique-constrained.
ALTER TABLE notifications ADD COLUMN key TEXT;
CREATE UNIQUE INDEX notifications_key ON notifications(key);
"#,
    r#"
-- Saved agents: instructions, a model (empty: chatd's default) and the tools
-- they may use (a JSON array of names; NULL: every tool).
CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    instructions TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    tools TEXT,
    created TEXT NOT NULL,
    updated TEXT NOT NULL
);
-- The agent a chat was made with; looked up at each run (gone: none).
ALTER TABLE conversations ADD COLUMN agent_id TEXT;
"#,
    r#"
-- A send's idempotency key (connectord's message id): the same key again in
-- the same chat answers what the first send did and stores nothing.
CREATE TABLE send_keys (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    answer TEXT NOT NULL,
    -- unix seconds: housekeeping drops keys older than 7 days
    created_unix INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
"#,
    r#"
-- A card's button words when they are not the usual ones (a host command's
-- "always" holds for the whole box): a JSON object, NULL for the usual.
ALTER TABLE consents ADD COLUMN labels TEXT;
"#,
    r#"
-- A tool result's one line (what `tool.finished` said), for devices that
-- attach later; NULL on other messages and on results stored before it.
ALTER TABLE messages ADD COLUMN summary TEXT;
"#,
    r#"
-- A saved agent's model settings (the same JSON object as a chat's): a chat
-- made with the agent takes what its own settings leave unset.
ALTER TABLE agents ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
"#,
    r#"
-- File history (docs/files.md). A change set is one tool call's, one
-- command's, one upload's, one undo's or one scan's finding of what
-- someone changed outside tandem; its rows are the paths it touched, with
-- the content before and after as blobs by sha-256 (blobs/<sha[:2]>/<sha>).
CREATE TABLE file_sets (
    rev INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    -- the workspace's manifest it moved: the chat's id (its own folder) or `shared`
    workspace TEXT NOT NULL,
    run_id TEXT,
    call_id TEXT,
    -- user | tool | command | outside
    origin TEXT NOT NULL,
    -- what the scan could not look at (a bound reached), NULL when complete
    note TEXT,
    created TEXT NOT NULL,
    created_unix INTEGER NOT NULL
);
CREATE INDEX file_sets_conversation ON file_sets(conversation_id, rev);
CREATE INDEX file_sets_run ON file_sets(run_id);
-- The sets an undo put back (a turn's undo puts back several).
CREATE TABLE file_undoes (
    rev INTEGER NOT NULL REFERENCES file_sets(rev) ON DELETE CASCADE,
    undone INTEGER NOT NULL,
    PRIMARY KEY (rev, undone)
) WITHOUT ROWID;
CREATE TABLE file_changes (
    rev INTEGER NOT NULL REFERENCES file_sets(rev) ON DELETE CASCADE,
    path TEXT NOT NULL,
    -- created | changed | deleted | moved (from from_path)
    op TEXT NOT NULL,
    from_path TEXT,
    -- NULL: no file there before / after
    before_sha TEXT,
    after_sha TEXT,
    size INTEGER NOT NULL,
    PRIMARY KEY (rev, path)
) WITHOUT ROWID;
CREATE INDEX file_changes_path ON file_changes(path);
CREATE INDEX file_changes_before ON file_changes(before_sha);
CREATE INDEX file_changes_after ON file_changes(after_sha);
-- What the last scan saw in each workspace: a file whose size, mtime and
-- inode still match is not read again. sha NULL: too big to keep that time.
CREATE TABLE workspace_files (
    workspace TEXT NOT NULL,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    sha TEXT,
    PRIMARY KEY (workspace, path)
) WITHOUT ROWID;
-- On a tool result: the card its tool line shows (a files_change).
ALTER TABLE messages ADD COLUMN card TEXT;
"#,
    r#"
-- Web Push: one row per subscribed browser (at most 10; by rowid, the
-- oldest go first). endpoint and keys are the browser's PushSubscription.
CREATE TABLE push_subscriptions (
    id TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL UNIQUE,
    p256dh TEXT NOT NULL,
    auth TEXT NOT NULL,
    created TEXT NOT NULL,
    -- the last push: `201`, `refused 413`, `failed` and when
    last_result TEXT,
    last_sent TEXT
);
"#,
    r#"
-- Documents read into text (documents/), by content and kind: a version of
-- a file is read once whatever its path. `reader` is the reader's version
-- (a newer reader reads again); `failure` the cause when it could not be read.
CREATE TABLE document_texts (
    sha TEXT NOT NULL,
    kind TEXT NOT NULL,
    reader INTEGER NOT NULL,
    text TEXT NOT NULL,
    parts TEXT NOT NULL,
    notes TEXT NOT NULL,
    failure TEXT,
    read_unix INTEGER NOT NULL,
    PRIMARY KEY (sha, kind)
) WITHOUT ROWID;
"#,
    r#"
-- The search index (index/): what each version of a file reads as, by its
-- sha-256, read once whatever its path. `state` `text`: its parts are below;
-- `names`: only its name is searched (binary, too big, unreadable: `note`).
CREATE TABLE search_files (
    sha TEXT PRIMARY KEY,
    reader INTEGER NOT NULL,
    state TEXT NOT NULL,
    chars INTEGER NOT NULL,
    note TEXT,
    indexed_unix INTEGER NOT NULL
) WITHOUT ROWID;
-- A page, sheet, slide or run of lines; its text is search_text's row of
-- the same id (trigram: any three characters find it, any case).
CREATE TABLE search_parts (
    id INTEGER PRIMARY KEY,
    sha TEXT NOT NULL,
    label TEXT,
    first_line INTEGER NOT NULL
);
CREATE INDEX search_parts_sha ON search_parts(sha);
CREATE VIRTUAL TABLE search_text USING fts5(body, tokenize = 'trigram');
CREATE INDEX workspace_files_sha ON workspace_files(sha);
"#,
    r#"
-- MCP connectors (mcp/): at most 20, names unique in any case. token,
-- headers and env are sealed (mcp.key), bound to the row's id and field.
-- state, reason, tools and tested are the last test's, cleared by an edit.
CREATE TABLE mcp_connectors (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    transport TEXT NOT NULL,
    url TEXT NOT NULL,
    command TEXT NOT NULL,
    args TEXT NOT NULL,
    token TEXT,
    headers TEXT,
    env TEXT,
    enabled INTEGER NOT NULL,
    state TEXT,
    reason TEXT,
    tools TEXT NOT NULL,
    tested TEXT,
    created TEXT NOT NULL,
    updated TEXT NOT NULL
);
CREATE UNIQUE INDEX mcp_connectors_name ON mcp_connectors(name COLLATE NOCASE);
"#,
    r#"
-- The MCP connectors a chat switched off for itself (PUT .../mcp).
CREATE TABLE chat_mcp_off (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    connector_id TEXT NOT NULL,
    PRIMARY KEY (conversation_id, connector_id)
);
"#,
    r#"
-- Sub-agents (runs/subagents.rs): a conversation of kind `subagent` is run
-- by its parent chat (parent_id) and is read-only to the API.
ALTER TABLE conversations ADD COLUMN kind TEXT NOT NULL DEFAULT 'chat';
ALTER TABLE conversations ADD COLUMN parent_id TEXT;
CREATE INDEX conversations_parent ON conversations(parent_id);
-- One row per spawn_agent call that started one; id is its conversation's.
-- wait: 1 while the parent's call waits for it, 0 in the background (a
-- restart moves a waiting one to the background). delivered: when its
-- result reached the parent (the call's result, a message or a waiting
-- message), set once in the job that put it there.
CREATE TABLE subagents (
    id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_run_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    title TEXT NOT NULL,
    task TEXT NOT NULL,
    -- the task's words, lowercased with spaces collapsed: the same-task check
    task_key TEXT NOT NULL,
    -- a JSON array of the tools it may use; NULL: the parent's
    tools TEXT,
    wait INTEGER NOT NULL,
    state TEXT NOT NULL,
    -- 1: stopped with its parent, nothing handed back in the background
    by_parent INTEGER NOT NULL DEFAULT 0,
    resumes INTEGER NOT NULL DEFAULT 0,
    -- the parent's last change set when it ended (the same-task check)
    files_rev INTEGER,
    result TEXT,
    delivered TEXT,
    created TEXT NOT NULL,
    ended TEXT
);
CREATE UNIQUE INDEX subagents_call ON subagents(parent_id, call_id);
CREATE INDEX subagents_parent ON subagents(parent_id, state);
-- A waiting message's card (a sub-agent's result), its message's on delivery.
ALTER TABLE pending ADD COLUMN card TEXT;
"#,
    r#"
-- Saved agents as sub-agents: what list_agents says of an agent, the tools
-- a chat opted into (saved_agents), and the agent a sub-agent runs as.
ALTER TABLE agents ADD COLUMN description TEXT NOT NULL DEFAULT '';
CREATE TABLE chat_opt_in (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    PRIMARY KEY (conversation_id, name)
);
ALTER TABLE subagents ADD COLUMN agent_id TEXT;
"#,
    r#"
-- One folder for an agent: its chats reach it (read or write) and their own
-- folder only. folder '' with a mode: none chosen yet (an import). An agent
-- deleted with a folder is remembered, so its chats never fall back to every file.
ALTER TABLE agents ADD COLUMN folder TEXT;
ALTER TABLE agents ADD COLUMN folder_mode TEXT;
CREATE TABLE agents_gone_confined (id TEXT PRIMARY KEY);
-- The egress preset its chats start with (NULL: the box's default).
ALTER TABLE agents ADD COLUMN network TEXT;
"#,
    r#"
-- Agents mode: a worker is a sub-agent row with its task's number in the
-- chat (1, 2, ...). expect: what the main agent expects back. report_asks:
-- times chatd asked it again for a report with a field missing. start_rev:
-- the workspace's last change set when it started (its changes are the
-- later ones). report: the whole report with chatd's check (result holds
-- what the main agent read of it).
ALTER TABLE subagents ADD COLUMN task_n INTEGER;
ALTER TABLE subagents ADD COLUMN expect TEXT;
ALTER TABLE subagents ADD COLUMN report_asks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE subagents ADD COLUMN start_rev INTEGER;
ALTER TABLE subagents ADD COLUMN report TEXT;
CREATE UNIQUE INDEX subagents_task ON subagents(parent_id, task_n);
"#,
    r#"
-- The chat's waiting messages a worker was shown as a note (a JSON array
-- of their ids): each once.
ALTER TABLE subagents ADD COLUMN noted TEXT;
"#,
    r#"
-- A chat's goal: one a chat, kept until it is cleared or replaced. turns:
-- the turns the goal started; steps: model calls while it was active;
-- asked_evidence: goal_done without evidence was answered once.
CREATE TABLE goals (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    state TEXT NOT NULL,
    paused_by TEXT,
    note TEXT,
    needs TEXT,
    evidence TEXT,
    turns INTEGER NOT NULL DEFAULT 0,
    max_turns INTEGER NOT NULL,
    steps INTEGER NOT NULL DEFAULT 0,
    max_steps INTEGER NOT NULL,
    asked_evidence INTEGER NOT NULL DEFAULT 0,
    set_at TEXT NOT NULL,
    updated TEXT NOT NULL
);
-- A goal line of the transcript: what it marks and, on `continue`, the turn.
ALTER TABLE messages ADD COLUMN goal_event TEXT;
ALTER TABLE messages ADD COLUMN goal_turn INTEGER;
"#,
    r#"
-- A chat's loops: a prompt sent again and again. interval_s NULL: self-paced
-- (the model sets next_at with schedule_next). next_at: unix ms by chatd's
-- clock (NULL: not due: a self-paced loop's run works or it waits).
-- current_run: the run it started, until that run ends.
CREATE TABLE loops (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    prompt TEXT NOT NULL,
    interval_s INTEGER,
    state TEXT NOT NULL,
    reason TEXT,
    wait TEXT,
    next_at INTEGER,
    runs INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    skipped INTEGER NOT NULL DEFAULT 0,
    current_run TEXT,
    created TEXT NOT NULL,
    updated TEXT NOT NULL
);
CREATE INDEX loops_due ON loops(state, next_at);
CREATE INDEX loops_chat ON loops(conversation_id);
-- A chat whose person said yes to a loop once: later loops start at once.
CREATE TABLE loops_confirmed (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE
);
-- Loop runs started on each UTC day of chatd's clock (the box's daily cap).
CREATE TABLE loop_days (day TEXT PRIMARY KEY, runs INTEGER NOT NULL);
-- A user line a loop sent: the loop and its run number.
ALTER TABLE messages ADD COLUMN loop_id TEXT;
ALTER TABLE messages ADD COLUMN loop_run INTEGER;
"#,
    r#"
-- The skills a chat switched off: a name (the skill that wins it) or
-- layer:name (that layer's only). Stored off, not on: a new skill is on.
CREATE TABLE chat_skills_off (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    switch TEXT NOT NULL,
    PRIMARY KEY (conversation_id, switch)
);
"#,
    r#"
-- A chat's tool group switches, one table for both kinds: a default-on
-- group switched off (is_on 0) and an opt-in group switched on (is_on 1).
CREATE TABLE chat_tool_groups (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    is_on INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, name)
);
INSERT INTO chat_tool_groups (conversation_id, name, is_on)
    SELECT conversation_id, name, 1 FROM chat_opt_in;
DROP TABLE chat_opt_in;
"#,
    r#"
-- Tool policies (always, ask, never) for the box and for one chat (over
-- the box's); a tool with none follows the permission mode.
CREATE TABLE tool_policies (
    tool TEXT PRIMARY KEY,
    policy TEXT NOT NULL
);
CREATE TABLE chat_tool_policies (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    tool TEXT NOT NULL,
    policy TEXT NOT NULL,
    PRIMARY KEY (conversation_id, tool)
);
"#,
];
