"""Wire views, one module per area; each validates, calls one service, serializes."""
