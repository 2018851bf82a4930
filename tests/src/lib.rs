pub fn _x() {}
pub mod sim;
