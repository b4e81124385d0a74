import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Shared

/// `tollgate-api admin …`: the admin API's actions from a shell, for operators without curl recipes.
///
/// Talks to a running API over HTTP (`--url`, `TOLLGATE_ADMIN_URL`) with `TOLLGATE_ADMIN_TOKEN` from the
/// environment (never a flag, so it stays out of `ps`). Prints the API's JSON answer; on a refusal prints its
/// message and exits 1, and exits 75 (`EX_TEMPFAIL`) only when running it again is safe and may succeed: the
/// API's own 503 that wrote nothing (its body names `dependency_unavailable` or `shutting_down`), a 429 (a proxy's
/// rate limit: the API sets none on admin routes), or a read or a PATCH (which sets what it sets however often it
/// runs) that got no answer, or a 502, a 504 or another 503. Those come from a proxy in front, which may have
/// passed the request on, or from the API when PostgreSQL was lost before it confirmed the change
/// (`outcome_unknown`), so a POST answered so, like one without an answer, may have been applied: 1, with a
/// hint. Redirects are not followed (1). An unset token or an unusable URL is one line and exit code 2, before
/// any request.
struct Admin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run admin API actions against a running tollgate-api (TOLLGATE_ADMIN_TOKEN from the environment).",
        subcommands: [Publishers.self, Apps.self, Products.self, Queue.self, DeadLetters.self, Requeue.self]
    )

    struct Connection: ParsableArguments {
        @Option(help: "The API's base URL (default: TOLLGATE_ADMIN_URL, else http://127.0.0.1:8080).")
        var url: String?

        /// `PATCH <collection>/<id>` with `{"enabled": …}`: enabling and disabling publishers and products.
        func setEnabled(_ enabled: Bool, _ collection: String, _ id: String) async throws {
            try await self.call(.PATCH, "\(collection)/\(try pathSegment(id))", body: ["enabled": enabled])
        }

        /// The API's base URL and the admin token, or one line naming the variable and exit code 2, as for every
        /// process's configuration (CONTRACT.md), before any request is made.
        func target() throws -> (base: String, token: String) {
            let environment = ProcessInfo.processInfo.environment
            // As every variable is read (Configuration): trimmed, and empty means unset.
            func given(_ value: String?) -> String? {
                value.map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
            }
            guard let token = given(environment["TOLLGATE_ADMIN_TOKEN"]) else {
                throw Self.refuse(ConfigurationError(variable: "TOLLGATE_ADMIN_TOKEN", "is not set"))
            }
            let variable = given(self.url) == nil ? "TOLLGATE_ADMIN_URL" : "--url"
            let text = given(self.url) ?? given(environment["TOLLGATE_ADMIN_URL"]) ?? "http://127.0.0.1:8080"
            guard let parsed = URL(string: text), ["http", "https"].contains(parsed.scheme?.lowercased()),
                  let host = parsed.host, !host.isEmpty, parsed.query == nil, parsed.fragment == nil, parsed.user == nil,
                  (1...65535).contains(parsed.port ?? 80)
            else {
                throw Self.refuse(ConfigurationError(variable: variable, "expected http(s)://host[:port][/path], with no user, query or fragment"))
            }
            return (text.trimmingSuffix("/"), token)
        }

        private static func refuse(_ error: ConfigurationError) -> ExitCode {
            error.report(as: "tollgate-api admin")
            return ExitCode(2)
        }

        /// What a script may run again later: the API could not serve it then, and nothing was applied or can be
        /// applied twice.
        static let tryAgainLater = ExitCode(75)

        /// Whether sending `method` again sets what it set once: a read, or a PATCH. A POST creates or rotates.
        private static func repeatable(_ method: HTTPMethod) -> Bool { method == .GET || method == .PATCH }

        /// What to do before running again a change that may have been applied.
        private static let lookFirst = "list what it changes before running it again"

        /// Sends one admin request and prints the answer; throws `ExitCode(1)` on a refusal and
        /// ``tryAgainLater`` when running it again is safe and may succeed.
        func call(_ method: HTTPMethod, _ path: String, body: [String: Any]? = nil) async throws {
            let (base, token) = try self.target()
            var request = HTTPClientRequest(url: base + "/admin/v1" + path)
            request.method = method
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            if let body {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])))
            }
            // Redirects are not followed: async-http-client would turn a POST into a GET on a 301 or 302, and a
            // create behind an http-to-https redirect would print a listing and exit 0.
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
            let answer: Result<(HTTPClientResponse, ByteBuffer), any Error>
            do {
                let response = try await client.execute(request, timeout: .seconds(30))
                answer = .success((response, try await response.body.collect(upTo: 16 << 20)))
            } catch {
                answer = .failure(error)
            }
            try? await client.shutdown()
            let (response, bytes): (HTTPClientResponse, ByteBuffer)
            switch answer {
            case .success(let received): (response, bytes) = received
            case .failure(let error):
                // A change sent without an answer back (a timeout, a connection cut) may have been made: rerunning
                // it blindly would create a second publisher, or rotate away credentials never seen.
                let hint = Self.repeatable(method) ? "" : "; if the request was sent, it may have been applied: \(Self.lookFirst)"
                FileHandle.standardError.write(Data("tollgate-api admin: cannot reach \(base), or no answer: \(error)\(hint)\n".utf8))
                throw Self.repeatable(method) ? Self.tryAgainLater : ExitCode(1)
            }
            let data = Data(bytes.readableBytesView)
            let parsed = try? JSONSerialization.jsonObject(with: data)
            let object = parsed as? [String: Any]
            let code = response.status.code
            guard (200..<300).contains(code) else {
                let message = object?["message"] as? String ?? String(decoding: data, as: UTF8.self)
                // The API's own 503 names why in its body: `dependency_unavailable` and `shutting_down` wrote
                // nothing, `outcome_unknown` may have (PostgreSQL was lost before it confirmed the change). A 502, a
                // 504 or any other 503 (an "upstream reset") is a proxy's, which may have passed the request on and
                // lost the API's answer.
                let refusedByAPI = code == 503 && ["dependency_unavailable", "shutting_down"].contains(object?["code"] as? String)
                let mayHaveApplied = code == 502 || code == 504 || (code == 503 && !refusedByAPI)
                var hint = mayHaveApplied && !Self.repeatable(method) ? "; the API may have applied it: \(Self.lookFirst)" : ""
                if !hint.isEmpty, object?["code"] as? String == "outcome_unknown" {
                    // A commit still waiting for a synchronous standby shows in no listing until it is done.
                    hint += " (a change PostgreSQL is still committing shows only once it is done: ops/OPERATIONS.md, PostgreSQL)"
                }
                if (300..<400).contains(code) {
                    hint = "; redirected to \(response.headers.first(name: "Location") ?? "nowhere"): point --url at the API itself"
                }
                FileHandle.standardError.write(Data("tollgate-api admin: \(code): \(message)\(hint)\n".utf8))
                // A 429 comes from a proxy's rate limit (the API sets none on admin routes), which refuses before passing on.
                throw code == 429 || refusedByAPI || (mayHaveApplied && Self.repeatable(method)) ? Self.tryAgainLater : ExitCode(1)
            }
            if let parsed, let pretty = try? JSONSerialization.data(withJSONObject: parsed, options: [.prettyPrinted, .sortedKeys]) {
                print(String(decoding: pretty, as: UTF8.self))
            } else {
                print(String(decoding: data, as: UTF8.self))
            }
        }
    }

    struct Publishers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create, list, enable, disable publishers; rotate their credentials.",
            subcommands: [Create.self, List.self, Enable.self, Disable.self, RotateCredentials.self]
        )

        struct Create: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Create a publisher; prints its credentials once.")
            @OptionGroup var connection: Connection
            @Option(help: "Its display name.") var name: String
            func run() async throws { try await self.connection.call(.POST, "/publishers", body: ["name": self.name]) }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List publishers.")
            @OptionGroup var connection: Connection
            func run() async throws { try await self.connection.call(.GET, "/publishers") }
        }

        struct Enable: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Accept a publisher's credentials again.")
            @OptionGroup var connection: Connection
            @Argument(help: "The publisher id.") var publisherId: String
            func run() async throws { try await self.connection.setEnabled(true, "/publishers", self.publisherId) }
        }

        struct Disable: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Refuse a publisher's credentials and customer tokens (within seconds on every API process).")
            @OptionGroup var connection: Connection
            @Argument(help: "The publisher id.") var publisherId: String
            func run() async throws { try await self.connection.setEnabled(false, "/publishers", self.publisherId) }
        }

        struct RotateCredentials: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Replace a publisher's credentials; prints the new ones once.")
            @OptionGroup var connection: Connection
            @Argument(help: "The publisher id.") var publisherId: String
            func run() async throws { try await self.connection.call(.POST, "/publishers/\(try pathSegment(self.publisherId))/credentials") }
        }
    }

    struct Apps: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add apps to a publisher, change their settings.", subcommands: [Create.self, Update.self])

        /// Which app, and where its shared secret is read from.
        struct AppOptions: ParsableArguments {
            @Option(help: "The publisher id.") var publisherId: String
            @Option(help: "The app's bundle id.") var bundleId: String
            @Option(help: "A file holding the app's App Store shared secret ('-' reads standard input); kept off the command line.")
            var sharedSecretFile: String?

            /// The shared secret in the file named, trimmed; nil when none is named.
            func sharedSecret() throws -> String? {
                guard let path = self.sharedSecretFile else { return nil }
                let data = path == "-" ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: path))
                return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            }
        }

        struct Create: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Add an app (bundle id) to a publisher.")
            @OptionGroup var connection: Connection
            @OptionGroup var app: AppOptions
            @Flag(help: "Refuse sandbox receipts for this app.") var noSandbox = false

            func run() async throws {
                var body: [String: Any] = ["bundleId": self.app.bundleId, "allowSandbox": !self.noSandbox]
                if let secret = try self.app.sharedSecret() { body["sharedSecret"] = secret }
                try await self.connection.call(.POST, "/publishers/\(try pathSegment(self.app.publisherId))/apps", body: body)
            }
        }

        struct Update: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Change an app's shared secret or sandbox setting; then requeue its jobs that failed shared_secret_mismatch."
            )
            @OptionGroup var connection: Connection
            @OptionGroup var app: AppOptions
            @Flag(help: "Remove the app's shared secret.") var removeSharedSecret = false
            @Option(help: "Whether the app's sandbox receipts are accepted: true or false.") var allowSandbox: Bool?

            func validate() throws {
                if self.app.sharedSecretFile != nil, self.removeSharedSecret {
                    throw ValidationError("give --shared-secret-file or --remove-shared-secret, not both")
                }
                if self.app.sharedSecretFile == nil, !self.removeSharedSecret, self.allowSandbox == nil {
                    throw ValidationError("nothing to change: give --shared-secret-file, --remove-shared-secret or --allow-sandbox")
                }
            }

            func run() async throws {
                var body: [String: Any] = [:]
                if let secret = try self.app.sharedSecret() { body["sharedSecret"] = secret }
                if self.removeSharedSecret { body["sharedSecret"] = NSNull() }
                if let allowSandbox = self.allowSandbox { body["allowSandbox"] = allowSandbox }
                let path = "/publishers/\(try pathSegment(self.app.publisherId))/apps/\(try bundleSegment(self.app.bundleId))"
                try await self.connection.call(.PATCH, path, body: body)
            }
        }
    }

    struct Products: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create, list, enable, disable products.", subcommands: [Create.self, List.self, Enable.self, Disable.self]
        )

        struct Create: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Create a product (offer) in a publisher's app.")
            @OptionGroup var connection: Connection
            @Option(help: "The publisher id.") var publisherId: String
            @Option(help: "The app's bundle id.") var bundleId: String
            @Option(help: "Apple's product identifier.") var productId: String
            @Option(help: "The offer id (default: the product id).") var offerId: String?
            @Option(help: "consumable, non_consumable, auto_renewable or non_renewing.") var kind: String
            @Option(help: "Its title.") var title: String
            @Option(help: "Its description.") var description: String?
            @Option(help: "Coins credited per purchase (consumable).") var coins: Int?
            @Option(help: "Days of access per purchase (non_renewing).") var durationDays: Int?
            @Flag(help: "Create it disabled.") var disabled = false

            func run() async throws {
                var body: [String: Any] = [
                    "publisherId": self.publisherId, "bundleId": self.bundleId, "productId": self.productId, "kind": self.kind,
                    "title": self.title, "enabled": !self.disabled,
                ]
                body["offerId"] = self.offerId
                body["description"] = self.description
                body["coins"] = self.coins
                body["durationDays"] = self.durationDays
                try await self.connection.call(.POST, "/products", body: body)
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "List a publisher's products, in the order they were created.",
                discussion: "With --limit, a page that is not the last ends with `next`; pass it to --after for the page after it."
            )
            @OptionGroup var connection: Connection
            @Option(help: "The publisher id.") var publisherId: String
            @Option(help: "At most this many (1-1000); without it, every product.") var limit: Int?
            @Option(help: "Start after this product: the `next` of the page before.") var after: String?
            func run() async throws {
                var query = "publisherId=\(try pathSegment(self.publisherId))"
                if let limit { query += "&limit=\(limit)" }
                if let after { query += "&after=\(try pathSegment(after))" }
                try await self.connection.call(.GET, "/products?" + query)
            }
        }

        struct Enable: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Accept receipts for a product again.")
            @OptionGroup var connection: Connection
            @Argument(help: "The product id (UUID).") var id: String
            func run() async throws { try await self.connection.setEnabled(true, "/products", self.id) }
        }

        struct Disable: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Refuse new receipts for a product (422 offer_disabled once no enabled product sells its offer).")
            @OptionGroup var connection: Connection
            @Argument(help: "The product id (UUID).") var id: String
            func run() async throws { try await self.connection.setEnabled(false, "/products", self.id) }
        }
    }

    struct Queue: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Queue counts: queued, processing, retrying, dead.")
        @OptionGroup var connection: Connection
        func run() async throws { try await self.connection.call(.GET, "/queue") }
    }

    struct DeadLetters: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List dead-lettered jobs with their reason and Apple's last answer, oldest first.",
            discussion: "A page that is not the last ends with `next`; pass it to --after for the page after it."
        )
        @OptionGroup var connection: Connection
        @Option(help: "At most this many (1-1000).") var limit = 100
        @Option(help: "Start after this cursor: the `next` of the page before.") var after: String?

        func validate() throws {
            if let after, !DeadLetterPage.isCursor(Substring(after)) { throw ValidationError("'\(after)' is not a page's next") }
        }

        func run() async throws {
            try await self.connection.call(.GET, "/dead-letters?limit=\(self.limit)" + (self.after.map { "&after=\($0)" } ?? ""))
        }
    }

    struct Requeue: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Put a dead-lettered job back in the queue.")
        @OptionGroup var connection: Connection
        @Argument(help: "The job id.") var jobId: String
        func run() async throws { try await self.connection.call(.POST, "/dead-letters/\(try pathSegment(self.jobId))/requeue") }
    }
}

/// An id for a URL path: letters, digits and '-' only, so no argument can reach another route.
private func pathSegment(_ id: String) throws -> String {
    guard !id.isEmpty, id.count <= 64, id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
        throw ValidationError("'\(id)' is not an id")
    }
    return id
}

/// A bundle id as one segment of a path (Apple's are letters, digits, `.`, `-` and `_`).
private func bundleSegment(_ bundleId: String) throws -> String {
    guard !bundleId.isEmpty, bundleId.count <= 255, bundleId.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }) else {
        throw ValidationError("'\(bundleId)' is not a bundle id")
    }
    return bundleId
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        self.hasSuffix(suffix) ? String(self.dropLast(suffix.count)) : self
    }
}
