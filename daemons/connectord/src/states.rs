//! The states connectord keeps as words: a binding's link, as `status`
//! shows it, and an inbound message's, as the store keeps it. Each a type,
//! so only these are written, and a stored one is read into its type where
//! its row is read.

tandem_shared::words! {
    /// A binding's link to its platform, as the API shows it.
    pub enum BindingState("binding state") {
        /// Its reader is starting (or has not said yet).
        Starting => "starting",
        Connected => "connected",
        /// It lost the platform and tries again.
        Retrying => "retrying",
        /// Switched off by itself (a refused token, another reader).
        Off => "off",
        /// Switched off by a person.
        Disabled => "disabled",
    }
}

tandem_shared::words! {
    /// What became of a message read and let in.
    pub enum InboundState("inbound state") {
        /// Read, not yet in chatd.
        Queued => "queued",
        /// In chatd, not answered yet.
        Sent => "sent",
        Answered => "answered",
        /// Too long, too fast, or refused by chatd: a notice is due.
        Refused => "refused",
        /// Its notice went out.
        Noticed => "noticed",
        /// A slash command chatd answered: its answer (the note) is due.
        Reply => "reply",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_shared::words::check_reads_back;

    #[test]
    fn every_binding_state_reads_back_as_itself() {
        check_reads_back::<BindingState>();
    }

    #[test]
    fn every_inbound_state_reads_back_as_itself() {
        check_reads_back::<InboundState>();
    }
}
