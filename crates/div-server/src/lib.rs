//! The local div control plane: HTTP server, SQLite store, sandboxed executor, meter and check judging.
