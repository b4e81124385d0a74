import Foundation

/// Formats instants as Apple's verifyReceipt date strings, by hand.
///
/// Apple writes every date three times: `yyyy-MM-dd HH:mm:ss Etc/GMT`, milliseconds as a string, and the
/// same wall-clock format in `America/Los_Angeles`. The emulator formats tens of dates per answer at
/// benchmark rates, so it avoids `DateFormatter` (costly, and not `Sendable`) and computes the civil date
/// directly. Pacific time follows the US rules in force since 2007; earlier instants ask Foundation's
/// time-zone database, which knows the older rules.
enum AppleDateFormatter {
    private static let pacific = TimeZone(identifier: "America/Los_Angeles")

    /// `yyyy-MM-dd HH:mm:ss Etc/GMT` for an instant in Unix milliseconds.
    static func gmt(milliseconds: Int64) -> String {
        format(seconds: floorDivide(milliseconds, 1000), suffix: " Etc/GMT")
    }

    /// `yyyy-MM-dd HH:mm:ss America/Los_Angeles` for an instant in Unix milliseconds.
    static func pacificTime(milliseconds: Int64) -> String {
        let seconds = floorDivide(milliseconds, 1000)
        return format(seconds: seconds + pacificOffset(seconds: seconds), suffix: " America/Los_Angeles")
    }

    /// The offset of Pacific time from UTC, in seconds, at a UTC instant.
    static func pacificOffset(seconds: Int64) -> Int64 {
        let standard: Int64 = -8 * 3600
        let year = civilDate(days: floorDivide(seconds, 86_400)).year
        guard year >= 2007 else {
            // Before the 2007 rules the transition dates differ; the system database has them.
            return Int64(pacific?.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(seconds))) ?? Int(standard))
        }
        // Daylight time runs from the second Sunday of March, 02:00 PST (10:00 UTC),
        // to the first Sunday of November, 02:00 PDT (09:00 UTC).
        let dstStart = (nthSunday(2, month: 3, year: year) * 86_400) + 10 * 3600
        let dstEnd = (nthSunday(1, month: 11, year: year) * 86_400) + 9 * 3600
        return (dstStart..<dstEnd).contains(seconds) ? standard + 3600 : standard
    }

    // MARK: Calendar arithmetic (Howard Hinnant's civil-date algorithms)

    private static func format(seconds: Int64, suffix: StaticString) -> String {
        let days = floorDivide(seconds, 86_400)
        let secondOfDay = seconds - days * 86_400
        let date = civilDate(days: days)
        guard (0...9999).contains(date.year) else {
            // Outside four-digit years the fixed-width fast path does not apply; such dates only come
            // from odd scenarios, so plain interpolation is fine.
            return "\(date.year)-\(twoDigits(date.month))-\(twoDigits(date.day)) "
                + "\(twoDigits(secondOfDay / 3600)):\(twoDigits(secondOfDay % 3600 / 60)):\(twoDigits(secondOfDay % 60))"
                + suffix.description
        }
        let suffixLength = suffix.utf8CodeUnitCount
        return String(unsafeUninitializedCapacity: 19 + suffixLength) { text in
            func put(_ value: Int64, width: Int, at offset: Int) {
                var remaining = value
                for position in stride(from: offset + width - 1, through: offset, by: -1) {
                    text[position] = UInt8(ascii: "0") + UInt8(remaining % 10)
                    remaining /= 10
                }
            }
            put(date.year, width: 4, at: 0)
            text[4] = UInt8(ascii: "-")
            put(date.month, width: 2, at: 5)
            text[7] = UInt8(ascii: "-")
            put(date.day, width: 2, at: 8)
            text[10] = UInt8(ascii: " ")
            put(secondOfDay / 3600, width: 2, at: 11)
            text[13] = UInt8(ascii: ":")
            put(secondOfDay % 3600 / 60, width: 2, at: 14)
            text[16] = UInt8(ascii: ":")
            put(secondOfDay % 60, width: 2, at: 17)
            for index in 0..<suffixLength {
                text[19 + index] = suffix.utf8Start[index]
            }
            return 19 + suffixLength
        }
    }

    private static func twoDigits(_ value: Int64) -> String {
        value < 10 ? "0\(value)" : "\(value)"
    }

    /// Year, month and day of a count of days since 1970-01-01.
    static func civilDate(days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468
        let era = floorDivide(shifted, 146_097)
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day)
    }

    /// Days since 1970-01-01 of a civil date.
    static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
        let adjustedYear = month <= 2 ? year - 1 : year
        let era = floorDivide(adjustedYear, 400)
        let yearOfEra = adjustedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// Days since 1970-01-01 of the `n`th Sunday of a month.
    private static func nthSunday(_ n: Int64, month: Int64, year: Int64) -> Int64 {
        let first = days(year: year, month: month, day: 1)
        // 1970-01-01 was a Thursday: weekday 4 when Sunday is 0.
        let weekday = floorModulo(first + 4, 7)
        return first + (7 - weekday) % 7 + (n - 1) * 7
    }

    private static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
        let quotient = value / divisor
        return (value % divisor < 0) ? quotient - 1 : quotient
    }

    private static func floorModulo(_ value: Int64, _ divisor: Int64) -> Int64 {
        let remainder = value % divisor
        return remainder < 0 ? remainder + divisor : remainder
    }
}
