import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
@testable import AppStoreEmulator

@Suite("port file")
struct PortFileTests {
    @Test("a live server writes its bound port to the port file")
    func livePortFile() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("emulator-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let portFile = directory.appendingPathComponent("port").path
        #expect(PortFileWriter.canWrite(to: portFile))
        #expect(!PortFileWriter.canWrite(to: directory.appendingPathComponent("missing/port").path))
        // A directory, or a path naming one, cannot receive the file: rename(2) would fail once listening.
        #expect(!PortFileWriter.canWrite(to: directory.path))
        #expect(!PortFileWriter.canWrite(to: portFile + "/"))

        var configuration = EmulatorConfiguration()
        configuration.port = 0
        configuration.portFile = portFile
        try await buildApplication(configuration).test(.live) { client in
            let response = try await client.execute(uri: "/health", method: .get)
            #expect(response.status == .ok)
            let written = try String(contentsOfFile: portFile, encoding: .utf8)
            #expect(written == "\(try #require(client.port))\n")
            // Only the final file remains: the temporary one was renamed.
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["port"])
        }
    }
}
