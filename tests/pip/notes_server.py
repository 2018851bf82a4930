"""An MCP server made with the MCP project's Python SDK (PyPI `mcp`), for the
MCP connector tests."""

import os
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("notes")


@server.tool(annotations={"readOnlyHint": True})
def count_words(text: str) -> str:
    """Counts the words of a text."""
    return f"{len(text.split())} words"


@server.tool()
def whoami() -> str:
    """Says which uid the server runs as, where, and whether it may read the workspace."""
    workspace = "open" if os.access("/workspace", os.R_OK | os.X_OK) else "closed"
    return (
        f"uid {os.getuid()} in {os.getcwd()} with python "
        f"{sys.version_info[0]}.{sys.version_info[1]}; workspace {workspace}"
    )


@server.tool()
async def learn(word: str, ctx: Context) -> str:
    """Adds a tool say_<word> that says the word, and tells the client."""

    def say() -> str:
        return word

    server.add_tool(say, name=f"say_{word}", description=f"Says {word}.")
    await ctx.session.send_tool_list_changed()
    return f"learned {word}"


@server.prompt()
def tidy(style: str) -> str:
    """Asks for notes tidied in a style."""
    return f"Tidy these notes in a {style} style."


@server.resource("notes://today", mime_type="text/plain")
def today() -> str:
    """Today's notes."""
    return "buy bread; call the bank"


if __name__ == "__main__":
    server.run()
