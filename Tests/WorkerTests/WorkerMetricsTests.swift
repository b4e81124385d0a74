import Testing
@testable import Worker

@Suite("Worker metrics")
struct WorkerMetricsTests {
    @Test("Apple's status label: documented statuses as themselves, anything else in two bounded groups")
    func statusLabel() {
        #expect(WorkerMetrics.statusLabel(nil) == "none")
        #expect(WorkerMetrics.statusLabel(0) == "0")
        #expect(WorkerMetrics.statusLabel(21007) == "21007")
        #expect(WorkerMetrics.statusLabel(21010) == "21010")
        #expect(WorkerMetrics.statusLabel(21100) == "211xx")
        #expect(WorkerMetrics.statusLabel(21199) == "211xx")
        for status in [-1, 1, 200, 21011, 21099, 21200, Int.max] {
            #expect(WorkerMetrics.statusLabel(status) == "other", "\(status)")
        }
    }
}
