//! C API for the sync primitives (mutex, rwmutex, cond, once).
