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

    /// Creates the metrics a scrape should show even before the first job (zero, not absent).
    static func register() {
        Self.inFlight.set(0)
        Self.attempts.increment(by: 0)
    }
}
