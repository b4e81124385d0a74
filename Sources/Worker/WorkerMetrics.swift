import Metrics
import Shared

/// The worker's metrics (swift-metrics, exported by Prometheus).
enum WorkerMetrics {
    static func appleCall(environment: String, verdict: AppleVerdict, duration: Duration) {
        let outcome: String
        switch verdict {
        case .valid: outcome = "valid"
        case .askSandbox: outcome = "ask_sandbox"
        case .askProduction: outcome = "ask_production"
        case .reject(let reason, _): outcome = "reject_\(reason.rawValue)"
        case .expired: outcome = "reject_expired"
        case .fail(let reason, _): outcome = "fail_\(reason.rawValue)"
        case .retry: outcome = "retry"
        }
        MetricHandles.timer("tollgate_apple_call_duration_seconds", [
            ("environment", environment), ("status", Self.statusLabel(verdict.appleStatus)), ("outcome", outcome),
        ]).record(duration: duration)
    }

    /// Apple's status as a label: the documented ones as themselves, 21100–21199 (Apple's internal errors) as
    /// `211xx`, anything else as `other`, so whatever answers at the configured URL cannot grow the series.
    static func statusLabel(_ status: Int?) -> String {
        switch status {
        case nil: "none"
        case let status? where status == 0 || (21000...21010).contains(status): String(status)
        case let status? where (21100...21199).contains(status): "211xx"
        default: "other"
        }
    }

    /// Histogram buckets by metric name. Accepted → granted includes every retry (backoff up to 300 s, jobs up
    /// to `TOLLGATE_RETRY_MAX_AGE_S`); the wait step, a backlog; an Apple call, the 15 s timeout and longer
    /// ones. The library's default (5 ms to 10 s) put all of those in `+Inf`.
    static let durationBuckets: [String: [Duration]] = [
        "tollgate_accepted_to_granted_seconds": [
            .milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(230), .milliseconds(250), .milliseconds(300),
            .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30), .seconds(60),
            .seconds(120), .seconds(300), .seconds(900), .seconds(3600), .seconds(21600), .seconds(86400),
        ],
        "tollgate_job_step_seconds": [
            .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
            .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5),
            .seconds(10), .seconds(30), .seconds(60), .seconds(300), .seconds(900), .seconds(3600),
        ],
        "tollgate_apple_call_duration_seconds": [
            .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(200), .milliseconds(300), .milliseconds(500),
            .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(15), .seconds(20), .seconds(30),
            .seconds(60), .seconds(120),
        ],
    ]

    /// One processing attempt of a job (a first try or a retry).
    static let attempts = Counter(label: "tollgate_job_attempts_total")

    static func job(status: JobStatus, reason: JobReason?) {
        MetricHandles.counter("tollgate_jobs_total", [("status", status.rawValue), ("reason", reason?.rawValue ?? "")]).increment()
    }

    static func grantLatency(milliseconds: Int) {
        // The API's reading of Redis' clock stamped acceptedAt: two readings may differ by a few ms.
        Self.acceptedToGranted.recordMilliseconds(max(0, milliseconds))
    }

    static let acceptedToGranted = Timer(label: "tollgate_accepted_to_granted_seconds")

    static let inFlight = Meter(label: "tollgate_verifications_in_flight")

    /// A step of a job besides Apple's answer (`tollgate_apple_call_duration_seconds`); with it, the steps
    /// say where accepted → granted goes.
    enum Step: String, CaseIterable {
        /// From accepted to the first attempt's start: the wait in the queue.
        case wait
        /// Marking the job processing in Redis.
        case start
        /// The grant's transaction in PostgreSQL.
        case grant
        /// Recording the outcome in Redis.
        case finish
    }

    static func step(_ step: Step, _ duration: Duration) {
        Self.timer(step).record(duration: duration)
    }

    static func step(_ step: Step, milliseconds: Int) {
        Self.timer(step).recordMilliseconds(milliseconds)
    }

    private static func timer(_ step: Step) -> Timer {
        MetricHandles.timer("tollgate_job_step_seconds", [("step", step.rawValue)])
    }

    /// Creates the metrics a scrape should show even before the first job (zero, not absent).
    static func register() {
        Self.inFlight.set(0)
        for step in Step.allCases { _ = Self.timer(step) }
        Self.attempts.increment(by: 0)
    }
}
