//! hostexecd's integration tests, one binary (one link): the daemon itself,
//! its containment, and chatd's `bash` tool through it (its file history too). Each module is one
//! area's tests; every test that runs hostexecd holds `hostexec::shared`,
//! so the fork bomb (which fills nobody's process count) runs alone.

mod host;
mod host_files;
mod hostexec;
mod hostexec_contain;
