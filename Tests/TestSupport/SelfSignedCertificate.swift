import Foundation

/// A self-signed certificate for 127.0.0.1 (with the IP as its subject alternative name) and its key, made
/// by `openssl` in a folder of the test state directory, for TLS servers of the tests' own.
public struct SelfSignedCertificate: Sendable {
    /// The folder holding both files, for anything else the server needs.
    public let directory: String
    public var certificatePath: String { "\(self.directory)/cert.pem" }
    public var keyPath: String { "\(self.directory)/key.pem" }

    /// Makes one in a new folder named after `purpose`; `openssl` runs on a thread of its own, not on Swift's
    /// cooperative pool (making an RSA key can take most of a second on a loaded machine).
    public init(purpose: String) async throws {
        self = try await offThePool { try SelfSignedCertificate(blockingPurpose: purpose) }
    }

    private init(blockingPurpose purpose: String) throws {
        self.directory = try TestEnvironment.stateDirectory() + "/\(purpose)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
        let generate = Process()
        generate.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        generate.arguments = [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", self.keyPath, "-out", self.certificatePath,
        ]
        generate.standardOutput = FileHandle.nullDevice
        generate.standardError = FileHandle.nullDevice
        try generate.run()
        generate.waitUntilExit()
        guard generate.terminationStatus == 0 else { throw ManagedProcess.Failure("openssl could not make a certificate") }
    }
}
