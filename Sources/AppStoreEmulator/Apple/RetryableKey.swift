/// The spelling of Apple's retry flag for statuses 21100–21199.
///
/// Apple documents `is-retryable` but has been seen sending `is_retryable`; a client must accept both, so
/// the emulator can emit either.
enum RetryableKey: String, Codable, Sendable {
    case hyphen = "is-retryable"
    case underscore = "is_retryable"
}
