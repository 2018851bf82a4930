"""An MCP server made with the MCP project's Python SDK (PyPI `mcp`), for the
MCP connector tests."""

import os
import sys

from mcp.server.mcpserver import MCPServer

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


if __name__ == "__main__":
    server.run()
