//! C API for channels and select.
