//! The C ABI (`include/pipecast.h`) — to be written.
