import Testing
@testable import Worker

@Suite("Consumer timing")
struct ConsumerTests {
    /// Entries are renewed every quarter of the claim idle time, so a live worker's entry never looks
    /// silent; a claim idle time of a few milliseconds must not make that a loop waking every millisecond.
    @Test(arguments: [
        (60_000, Duration.milliseconds(15_000)), (1_000, .milliseconds(250)), (40, .milliseconds(10)),
        (39, .milliseconds(10)), (4, .milliseconds(10)), (1, .milliseconds(10)),
    ])
    func keepInterval(claimMinIdleMilliseconds: Int, expected: Duration) {
        #expect(Consumer.keepInterval(claimMinIdleMilliseconds: claimMinIdleMilliseconds) == expected)
    }

    /// A claim may hand back an entry this worker runs already: it is taken once.
    @Test func heldEntryTakenOnce() {
        let held = HeldEntries()
        #expect(held.insert("1-0"))
        #expect(held.insert("1-0") == false)
        held.remove("1-0")
        #expect(held.insert("1-0"))
    }
}
