import Foundation

/// Formats and parses PostgreSQL's ISO `timestamptz` text in UTC (`2026-11-21 15:20:11.123456+00`).
///
/// Done by hand (civil-from-days arithmetic) because it runs for every timestamp of every row, and a
/// `DateFormatter` is both slow and not safe to share across threads.
enum PostgresTimestamp {
    /// `YYYY-MM-DD HH:MM:SS` for a Unix time in UTC.
    static func format(unixSeconds: Int64) -> String {
        let days = unixSeconds >= 0 ? unixSeconds / 86_400 : (unixSeconds - 86_399) / 86_400
        let secondsOfDay = unixSeconds - days * 86_400
        let (year, month, day) = Self.civil(fromDays: days)
        let hour = secondsOfDay / 3600
        let minute = (secondsOfDay % 3600) / 60
        let second = secondsOfDay % 60
        var text = ""
        text.reserveCapacity(32)
        Self.append(year, width: 4, to: &text)
        text += "-"
        Self.append(month, width: 2, to: &text)
        text += "-"
        Self.append(day, width: 2, to: &text)
        text += " "
        Self.append(hour, width: 2, to: &text)
        text += ":"
        Self.append(minute, width: 2, to: &text)
        text += ":"
        Self.append(second, width: 2, to: &text)
        return text
    }

    /// `value` in decimal, zero-padded to `width` digits (`String(format:)` was a visible cost per grant).
    static func append(_ value: Int64, width: Int, to text: inout String) {
        let digits = String(value.magnitude)
        if value < 0 { text += "-" }
        if digits.utf8.count < width { text += String(repeating: "0", count: width - digits.utf8.count) }
        text += digits
    }

    /// Parses `YYYY-MM-DD HH:MM:SS[.ffffff](+|-)HH[:MM]`.
    static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 22 else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for index in range {
                guard bytes.indices.contains(index), (48...57).contains(bytes[index]) else { return nil }
                value = value * 10 + Int64(bytes[index] - 48)
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
            let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19)
        else { return nil }
        var index = 19
        var fraction = 0.0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            while index < bytes.count, (48...57).contains(bytes[index]) {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        guard index + 3 <= bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-"),
            let offsetHours = number((index + 1)..<(index + 3))
        else { return nil }
        var offsetMinutes: Int64 = 0
        if index + 6 <= bytes.count, bytes[index + 3] == UInt8(ascii: ":"), let minutes = number((index + 4)..<(index + 6)) {
            offsetMinutes = minutes
        }
        let sign: Int64 = bytes[index] == UInt8(ascii: "-") ? -1 : 1
        let days = Self.days(fromCivil: year, month, day)
        let local = days * 86_400 + hour * 3600 + minute * 60 + second
        let utc = local - sign * (offsetHours * 3600 + offsetMinutes * 60)
        return Date(timeIntervalSince1970: Double(utc) + fraction)
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp + (mp < 10 ? 3 : -9)
        return (m <= 2 ? y + 1 : y, m, d)
    }
}
