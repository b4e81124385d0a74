import Foundation
import Testing
@testable import AppStoreEmulator

@Suite("Apple date strings")
struct AppleDateFormatterTests {
    @Test("GMT and Pacific strings of known instants")
    func knownInstants() {
        #expect(AppleDateFormatter.gmt(milliseconds: 0) == "1970-01-01 00:00:00 Etc/GMT")
        #expect(AppleDateFormatter.gmt(milliseconds: 1_700_000_000_999) == "2023-11-14 22:13:20 Etc/GMT")
        #expect(AppleDateFormatter.pacificTime(milliseconds: 1_700_000_000_000) == "2023-11-14 14:13:20 America/Los_Angeles")
        // Summer: daylight time, seven hours behind.
        #expect(AppleDateFormatter.pacificTime(milliseconds: 1_690_000_000_000) == "2023-07-21 21:26:40 America/Los_Angeles")
        #expect(AppleDateFormatter.gmt(milliseconds: 1_709_164_800_000) == "2024-02-29 00:00:00 Etc/GMT")
        #expect(AppleDateFormatter.gmt(milliseconds: -1) == "1969-12-31 23:59:59 Etc/GMT")
    }

    @Test("Pacific offsets match the system time-zone database around every transition, 1990-2040")
    func pacificOffsetsMatchFoundation() throws {
        let pacific = try #require(TimeZone(identifier: "America/Los_Angeles"))
        // Hourly steps through each March and November, plus a coarse walk through the rest.
        var instants: [Int64] = []
        for year in 1990...2040 {
            for month in [3, 4, 10, 11] {
                let first = AppleDateFormatter.days(year: Int64(year), month: Int64(month), day: 1) * 86_400
                instants.append(contentsOf: stride(from: first, to: first + 31 * 86_400, by: 3600))
            }
            let start = AppleDateFormatter.days(year: Int64(year), month: 1, day: 1) * 86_400
            instants.append(contentsOf: stride(from: start, to: start + 366 * 86_400, by: 7 * 86_400 + 1234))
        }
        for seconds in instants {
            let expected = pacific.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(seconds)))
            #expect(AppleDateFormatter.pacificOffset(seconds: seconds) == Int64(expected), "at \(seconds)")
        }
    }

    @Test("civil dates round-trip over four centuries")
    func civilRoundTrip() {
        for days in stride(from: Int64(-200_000), through: 200_000, by: 97) {
            let date = AppleDateFormatter.civilDate(days: days)
            #expect(AppleDateFormatter.days(year: date.year, month: date.month, day: date.day) == days)
        }
    }
}
