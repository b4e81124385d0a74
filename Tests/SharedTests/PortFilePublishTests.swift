import Foundation
import Logging
import Shared
import Testing
import TestSupport

@Suite("the API's and the worker's port file")
struct PortFilePublishTests {
    @Test("the bound port is written whole; a file that cannot be written is an error line naming why, with no temporary file left")
    func publish() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tg-portfile-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        let lines = CapturedLines()
        let logger = Logger(label: "test.portfile") { _ in lines }

        let path = directory.appendingPathComponent("port").path
        PortFile.publish(8080, to: path, logger: logger)
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "8080\n")
        #expect(lines.lines.isEmpty)

        // A directory where the file should be: the rename fails.
        let taken = directory.appendingPathComponent("taken")
        try FileManager.default.createDirectory(at: taken.appendingPathComponent("inside"), withIntermediateDirectories: true)
        PortFile.publish(8080, to: taken.path, logger: logger)
        // A folder that does not exist: the temporary file cannot be written.
        PortFile.publish(8080, to: directory.appendingPathComponent("missing/port").path, logger: logger)
        #expect(lines.lines.count == 2)
        #expect(lines.lines.allSatisfy { $0 == "cannot write the port file" }, "\(lines.lines)")
        let errors = lines.metadataOfLines.map { $0["error"]?.description ?? "" }
        #expect(errors.first?.hasPrefix("cannot rename") == true, "\(errors)")
        #expect(errors.last?.hasPrefix("cannot write") == true, "\(errors)")
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(left == ["port", "taken"], "no temporary file left: \(left)")
    }
}
