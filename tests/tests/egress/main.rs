//! egressd's integration tests, one binary (one link): with chatd (routes
//! and consent cards), and in network namespaces (the sandbox user's rules,
//! the SSRF matrix, a LAN with public addresses; root only). Each module is
//! one area's tests.

mod egress;
mod egress_lan;
mod egress_netns;
