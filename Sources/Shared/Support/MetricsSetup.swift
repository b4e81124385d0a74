import Metrics
import Prometheus
import Synchronization

/// Prometheus metrics for a process: one registry, bootstrapped into swift-metrics once.
public enum MetricsSetup {
    private static let shared = Mutex<PrometheusCollectorRegistry?>(nil)

    /// The process's registry; the first call bootstraps swift-metrics with it.
    public static func bootstrap() -> PrometheusCollectorRegistry {
        self.shared.withLock { shared in
            if let shared { return shared }
            let registry = PrometheusCollectorRegistry()
            MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
            shared = registry
            return registry
        }
    }
}
