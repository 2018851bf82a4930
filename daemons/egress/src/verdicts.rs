//! The words egressd stores for its decisions: a chat's rule (allow or
//! deny, from a card or the API) and an audited connection's verdict. Each
//! a type, so only these are written, and a stored one is read into its
//! type where its row is read.

tandem_shared::words! {
    /// What a chat's rule says of one host:port.
    pub enum RuleVerdict("rule verdict") {
        Allow => "allow",
        Deny => "deny",
    }
}

tandem_shared::words! {
    /// Where a chat's rule came from.
    pub enum RuleSource("rule source") {
        /// A person's answer on a card ("always" or "deny").
        Card => "card",
        Api => "api",
    }
}

tandem_shared::words! {
    /// How an audited connection went.
    pub enum AuditVerdict("audit verdict") {
        Allowed => "allowed",
        Refused => "refused",
        /// Allowed, but the connection to the host failed.
        Failed => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_shared::words::check_reads_back;

    #[test]
    fn every_rule_verdict_reads_back_as_itself() {
        check_reads_back::<RuleVerdict>();
    }

    #[test]
    fn every_rule_source_reads_back_as_itself() {
        check_reads_back::<RuleSource>();
    }

    #[test]
    fn every_audit_verdict_reads_back_as_itself() {
        check_reads_back::<AuditVerdict>();
    }
}
