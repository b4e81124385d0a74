import Foundation
import Testing
@testable import Shared

@Suite("PostgresTimestamp")
struct PostgresTimestampTests {
    static func micros(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1_000_000).rounded())
    }

    @Test(
        "format writes UTC civil time",
        arguments: [
            (Int64(0), "1970-01-01 00:00:00"),
            (Int64(-1), "1969-12-31 23:59:59"),
            (Int64(-86_400), "1969-12-31 00:00:00"),
            (Int64(-86_401), "1969-12-30 23:59:59"),
            (Int64(951_782_400), "2000-02-29 00:00:00"),
            (Int64(1_700_000_000), "2023-11-14 22:13:20"),
            (Int64(-2_208_988_800), "1900-01-01 00:00:00"),
            (Int64(4_107_542_400), "2100-03-01 00:00:00"),
            (Int64(253_402_300_799), "9999-12-31 23:59:59"),
        ]
    )
    func format(seconds: Int64, expected: String) {
        #expect(PostgresTimestamp.format(unixSeconds: seconds) == expected)
    }

    @Test(
        "parse reads offsets, fractions and dates before 1970",
        arguments: [
            ("1970-01-01 00:00:00+00", 0.0),
            ("2023-11-14 22:13:20+00", 1_700_000_000.0),
            ("2023-11-14 22:13:20.5+00", 1_700_000_000.5),
            ("2023-11-14 22:13:20.123456+00", 1_700_000_000.123456),
            ("2024-01-01 05:30:00+05:30", 1_704_067_200.0),
            ("2023-12-31 16:00:00-08", 1_704_067_200.0),
            ("2023-12-31 14:30:00-09:30", 1_704_067_200.0),
            ("1969-12-31 23:59:59.5+00", -0.5),
            ("1969-12-31 23:59:58.750000+00", -1.25),
            ("1900-01-01 00:00:00+00", -2_208_988_800.0),
            ("1900-01-01 05:30:00.25+05:30", -2_208_988_799.75),
        ]
    )
    func parse(text: String, seconds: Double) throws {
        let date = try #require(PostgresTimestamp.parse(text))
        #expect(Self.micros(date) == Int64((seconds * 1_000_000).rounded()), "\(text)")
    }

    @Test("parse refuses what is not a timestamp", arguments: ["", "2023-11-14", "2023-11-14 22:13:20", "2023-11-14T22:13:20Z", "yyyy-mm-dd hh:mm:ss+00"])
    func parseRefuses(text: String) {
        #expect(PostgresTimestamp.parse(text) == nil)
    }

    @Test(
        "Date's postgres text round-trips to the microsecond",
        arguments: [
            0.0, 1.0, -1.0, 0.000001, -0.000001, -1.25, 1_700_000_000.123456, 1_700_000_000.999999, -1_000_000.654321,
            -2_208_988_800.5, 951_782_400.000001, 4_107_542_400.25, 253_402_300_799.5,
        ]
    )
    func roundTrip(seconds: Double) throws {
        let date = Date(timeIntervalSince1970: seconds)
        let text = try #require(date.postgresText)
        #expect(text.hasSuffix("+00"))
        let parsed = try #require(Date.decode(postgresText: text))
        #expect(Self.micros(parsed) == Self.micros(date), "\(text)")
    }

    @Test("the text of an instant before 1970 has a positive fraction")
    func negativeFraction() {
        #expect(Date(timeIntervalSince1970: -1.25).postgresText == "1969-12-31 23:59:58.750000+00")
        #expect(Date(timeIntervalSince1970: 1_700_000_000.5).postgresText == "2023-11-14 22:13:20.500000+00")
    }

    @Test("format and parse agree over many instants")
    func formatParseAgree() throws {
        var generator = SeededGenerator(seed: 1970)
        var mismatches: [Int64] = []
        for _ in 0..<5000 {
            let seconds = Int64.random(in: -5_000_000_000...10_000_000_000, using: &generator)
            let text = PostgresTimestamp.format(unixSeconds: seconds) + "+00"
            if PostgresTimestamp.parse(text).map({ Int64($0.timeIntervalSince1970) }) != seconds { mismatches.append(seconds) }
        }
        #expect(mismatches.isEmpty)
    }
}
