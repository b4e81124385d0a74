import Foundation

/// Wall-clock time in the units the queue stores.
public enum WallClock {
    /// Now, in Unix milliseconds.
    public static func nowMilliseconds() -> Int {
        Int((Date().timeIntervalSince1970 * 1000).rounded())
    }
}
