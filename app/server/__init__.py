"""The web front end: HTTP and static files, exposure checks, the websocket protocol."""
