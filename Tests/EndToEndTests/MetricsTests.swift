import AsyncHTTPClient
import Foundation
import Shared
import Testing
import TestSupport

/// Issue #7: live figures at both `/metrics` endpoints while a burst is processed.
@Suite("Metrics", .serialized)
struct MetricsTests {
    /// One sample of a Prometheus text exposition.
    struct Sample {
        let name: String
        let labels: [String: String]
        let value: Double
    }

    /// Parses `name{a="x",b="y"} value` lines (comments skipped).
    static func parse(_ text: String) -> [Sample] {
        text.split(separator: "\n").compactMap { line in
            guard !line.hasPrefix("#"), let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { return nil }
            let series = line[..<space]
            guard let brace = series.firstIndex(of: "{") else { return Sample(name: String(series), labels: [:], value: value) }
            var labels: [String: String] = [:]
            for pair in series[series.index(after: brace)..<series.index(before: series.endIndex)].split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                guard parts.count == 2 else { continue }
                labels[String(parts[0])] = String(parts[1].dropFirst().dropLast())
            }
            return Sample(name: String(series[..<brace]), labels: labels, value: value)
        }
    }

    /// The sum of every sample named `name` whose labels include `labels`.
    static func value(_ samples: [Sample], _ name: String, _ labels: [String: String] = [:]) -> Double? {
        let matching = samples.filter { sample in sample.name == name && labels.allSatisfy { key, value in sample.labels[key] == value } }
        return matching.isEmpty ? nil : matching.reduce(0) { $0 + $1.value }
    }

    static func scrape(_ system: TollgateSystem, _ url: String) async throws -> [Sample] {
        let response = try await system.http.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
        #expect(response.status == .ok)
        return Self.parse(String(buffer: try await response.body.collect(upTo: 16 << 20)))
    }

    @Test("a burst shows as queue lag on the API, then as requests, jobs, attempts, Apple calls and grant latency on both endpoints")
    func burstFigures() async throws {
        let system = try await TollgateSystem()
        do {
            let publisher = try await system.createPublisher(products: [ReceiptToAccessTests.coins])
            let count = 60
            let jobs = try await ReceiptToAccessTests.postBurst(system, publisher, count: count, latencyMs: 0)
            let api = system.apiBase + "/metrics"
            // A path no route has counts as `unmatched`, whatever the path.
            let stray = try await system.http.execute(HTTPClientRequest(url: system.apiBase + "/no/such/route"), timeout: .seconds(10))
            #expect(stray.status == .notFound)

            // No worker yet: the API's queue gauges show the backlog (sampled every 5 s).
            _ = try await Poll.until(timeout: .seconds(30), "the API's tollgate_queue_lag shows the burst") {
                let samples = try await Self.scrape(system, api)
                return Self.value(samples, "tollgate_queue_lag") == Double(count) ? true : nil
            }
            let accepted = try await Self.scrape(system, api)
            #expect(Self.value(accepted, "tollgate_http_requests_total", ["route": "/apple/payment", "method": "POST", "status": "200"]) == Double(count))
            #expect(Self.value(accepted, "tollgate_http_request_duration_seconds_count", ["route": "/apple/payment", "method": "POST"]) == Double(count))
            #expect(Self.value(accepted, "tollgate_queue_stream_length") == Double(count))
            #expect(Self.value(accepted, "tollgate_queue_pending") == 0)
            #expect(Self.value(accepted, "tollgate_queue_delayed") == 0)
            #expect(Self.value(accepted, "tollgate_queue_dead_letters") == 0)
            #expect(Self.value(accepted, "tollgate_http_requests_total", ["route": "unmatched", "method": "GET", "status": "404"]) == 1)
            #expect(Self.value(accepted, "tollgate_http_requests_total", ["route": "NotFound"]) == nil)
            // Routes are patterns: no job id or email reaches a label.
            #expect(!accepted.contains { $0.labels.values.contains { $0.contains("@") || jobs.contains($0) } })

            // A worker drains it; its own endpoint shows what it did.
            let worker = try await system.startWorker(name: "metrics-worker")
            try await ReceiptToAccessTests.waitUntilAllGranted(system, publisher, jobs: jobs, timeout: .seconds(120))
            let port = try await worker.port()
            let workerURL = "http://127.0.0.1:\(port)/metrics"
            // The counters move just after each job is finished in Redis (the finish step's last), so they
            // are polled for too.
            let done = try await Poll.until(timeout: .seconds(30), "the worker's gauges show an empty queue, its counters every grant") {
                let samples = try await Self.scrape(system, workerURL)
                let empty = Self.value(samples, "tollgate_queue_lag") == 0 && Self.value(samples, "tollgate_queue_pending") == 0
                return empty && Self.value(samples, "tollgate_job_step_seconds_count", ["step": "finish"]) == Double(count) ? samples : nil
            }
            // Where each job's time went besides Apple: every step once per job; the burst waited for the worker.
            for step in ["wait", "start", "grant", "finish"] {
                #expect(Self.value(done, "tollgate_job_step_seconds_count", ["step": step]) == Double(count), "step \(step)")
            }
            #expect((Self.value(done, "tollgate_job_step_seconds_sum", ["step": "wait"]) ?? 0) > 0)
            #expect(Self.value(done, "tollgate_jobs_total", ["status": "granted"]) == Double(count))
            #expect(Self.value(done, "tollgate_job_attempts_total") == Double(count))
            #expect(Self.value(done, "tollgate_apple_call_duration_seconds_count", ["environment": "Production", "status": "0"]) == Double(count))
            #expect(Self.value(done, "tollgate_accepted_to_granted_seconds_count") == Double(count))
            // Their buckets reach what they measure: retries (minutes), a backlog's wait, Apple's 15 s timeout.
            for (name, top) in [("tollgate_accepted_to_granted_seconds", 86_400.0), ("tollgate_job_step_seconds", 3600), ("tollgate_apple_call_duration_seconds", 120)] {
                let bounds = Set(done.filter { $0.name == name + "_bucket" }.compactMap { $0.labels["le"].flatMap(Double.init) })
                #expect(bounds.contains(60) && bounds.contains(top), "\(name): \(bounds.sorted())")
            }
            #expect(Self.value(done, "tollgate_verifications_in_flight") == 0)
            // How old the queue gauges are: read within the last few intervals.
            let sampledAt = try #require(Self.value(done, "tollgate_queue_sampled_at_seconds"))
            #expect(abs(Date().timeIntervalSince1970 - sampledAt) < 60, "\(sampledAt)")
            _ = try await Poll.until(timeout: .seconds(30), "the API's gauges show an empty queue") {
                Self.value(try await Self.scrape(system, api), "tollgate_queue_lag") == 0 ? true : nil
            }
        } catch {
            await system.shutdown()
            throw error
        }
        await system.shutdown()
    }
}
