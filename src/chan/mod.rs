//! Channels and select (Go's chan.go, select.go). Under construction.
