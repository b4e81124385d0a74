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
            ("environment", environment), ("status", verdict.appleStatus.map(String.init) ?? "none"), ("outcome", outcome),
        ]).record(duration: duration)
    }

    /// One processing attempt of a job (a first try or a retry).
    static let attempts = Counter(label: "tollgate_job_attempts_total")

    static func job(status: JobStatus, reason: JobReason?) {
        MetricHandles.counter("tollgate_jobs_total", [("status", status.rawValue), ("reason", reason?.rawValue ?? "")]).increment()
    }

    static func grantLatency(milliseconds: Int) {
        Self.acceptedToGranted.recordMilliseconds(milliseconds)
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
