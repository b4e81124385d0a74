/// A test fixture that could not be read.
struct FixtureError: Error, CustomStringConvertible {
    var description: String
}
