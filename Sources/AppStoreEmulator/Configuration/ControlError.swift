/// A refused emulator control request (`POST /emulator/config`), answered with HTTP 400 as the project's
/// error JSON: `{"message","code","field"}`.
struct ControlError: Error, Encodable, Equatable, Sendable {
    /// What is wrong, for a person.
    var message: String
    /// The machine code: `malformed_json` or `invalid_field`.
    var code: String
    /// Which field is at fault, when one is.
    var field: String?

    /// The body is not a JSON object with the expected field types.
    static func malformedJSON() -> ControlError {
        ControlError(message: "the body must be a JSON object such as {\"latencyMs\": 0, \"failRate\": 0, \"failMode\": \"http503\"}", code: "malformed_json")
    }

    /// One field carries a value outside its range.
    static func invalidField(_ field: String, _ message: String) -> ControlError {
        ControlError(message: message, code: "invalid_field", field: field)
    }
}
