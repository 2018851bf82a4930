pub mod chat;
pub mod doctor;
pub mod egress;
pub mod sandbox;
pub mod service;
pub mod status;
pub mod up;
pub mod watchdog;
