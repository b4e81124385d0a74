import Foundation
import Hummingbird
import Logging
import Shared

/// `/admin/v1`: publishers, apps, products, the queue and its dead letters.
struct AdminController {
    let services: APIServices

    func register(on group: RouterGroup<TollgateRequestContext>) {
        group.post("/publishers", use: self.createPublisher)
        group.get("/publishers", use: self.listPublishers)
        group.patch("/publishers/:publisherId", use: self.updatePublisher)
        group.post("/publishers/:publisherId/credentials", use: self.rotateCredentials)
        group.post("/publishers/:publisherId/apps", use: self.createApp)
        group.patch("/publishers/:publisherId/apps/:bundleId", use: self.updateApp)
        group.post("/products", use: self.createProduct)
        group.get("/products", use: self.listProducts)
        group.patch("/products/:productId", use: self.updateProduct)
        group.get("/queue", use: self.queue)
        group.get("/dead-letters", use: self.deadLetters)
        group.post("/dead-letters/:jobId/requeue", use: self.requeue)
    }

    // MARK: Publishers and apps

    struct PublisherCreated: Encodable {
        struct BasicAuth: Encodable {
            let username: String
            let password: String
        }

        let id: String
        let name: String
        let publisherToken: String
        let basicAuth: BasicAuth

        init(_ publisher: Publisher, _ credentials: PublisherCredentials) {
            self.id = publisher.id.lowercasedString
            self.name = publisher.name
            self.publisherToken = credentials.publisherToken
            self.basicAuth = BasicAuth(username: credentials.username, password: credentials.password)
        }
    }

    @Sendable func createPublisher(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let json = try await JSONObject.read(request)
        let name = try json.requiredString("name")
        // PostgreSQL counts code points, not grapheme clusters.
        guard name.unicodeScalars.count <= 200 else { throw APIError.invalid("name", code: "invalid_name", "name must be at most 200 characters") }
        let (publisher, credentials) = try await self.services.catalog.createPublisher(name: name)
        context.logger.info("publisher created", metadata: ["publisher": "\(publisher.id.lowercasedString)"])
        return JSONBody.response(.created, PublisherCreated(publisher, credentials))
    }

    struct PublisherView: Encodable {
        let id: String
        let name: String
        let enabled: Bool

        init(_ publisher: Publisher) {
            self.id = publisher.id.lowercasedString
            self.name = publisher.name
            self.enabled = publisher.enabled
        }
    }

    struct PublisherList: Encodable {
        let publishers: [PublisherView]
    }

    @Sendable func listPublishers(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        JSONBody.response(.ok, PublisherList(publishers: try await self.services.catalog.publishers().map(PublisherView.init)))
    }

    /// `{"enabled": false}` turns a publisher's credentials and customer tokens off within seconds on every API process.
    @Sendable func updatePublisher(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        guard let id = context.parameters.get("publisherId").flatMap(UUID.init(uuidString:)), try await self.services.catalog.publisherExists(id) else {
            throw APIError.notFound
        }
        let json = try await JSONObject.read(request)
        try json.refuseUnknown(["enabled"])
        guard let enabled = try json.bool("enabled") else { throw APIError.missingField("enabled") }
        guard let publisher = try await self.services.catalog.setPublisher(id: id, enabled: enabled) else { throw APIError.notFound }
        self.services.authenticator.forgetCachedPublishers()
        context.logger.info("publisher updated", metadata: ["publisher": "\(id.lowercasedString)", "enabled": "\(enabled)"])
        // Enabling needs no announcement: a record another process's snapshot refuses waits for a newer one.
        if !enabled { await self.announceRevocation(of: id, context: context) }
        return JSONBody.response(.ok, PublisherView(publisher))
    }

    /// New credentials, shown once; the old ones stop working within seconds on every API process.
    @Sendable func rotateCredentials(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        guard let id = context.parameters.get("publisherId").flatMap(UUID.init(uuidString:)),
            let (publisher, credentials) = try await self.services.catalog.rotateCredentials(id: id)
        else { throw APIError.notFound }
        self.services.authenticator.forgetCachedPublishers()
        context.logger.info("publisher credentials rotated", metadata: ["publisher": "\(id.lowercasedString)"])
        await self.announceRevocation(of: id, context: context)
        return JSONBody.response(.created, PublisherCreated(publisher, credentials))
    }

    /// Tells the other API processes that a publisher's credentials were taken away. The change is made
    /// already: without Redis they apply it at their next reload, within ``PublisherDirectory/lifetime``.
    private func announceRevocation(of publisherId: UUID, context: TollgateRequestContext) async {
        do {
            try await self.services.queue.announceRevocation(of: publisherId)
        } catch {
            context.logger.warning(
                "cannot announce the revocation to the other API processes; they apply it within seconds",
                metadata: ["publisher": "\(publisherId.lowercasedString)", "error": "\(error)"]
            )
        }
    }

    struct AppView: Encodable {
        let id: String
        let publisherId: String
        let bundleId: String
        let allowSandbox: Bool
    }

    @Sendable func createApp(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        guard let publisherId = context.parameters.get("publisherId").flatMap(UUID.init(uuidString:)) else { throw APIError.notFound }
        let json = try await JSONObject.read(request)
        // Every field is read first (400 for one missing or ill-typed), then judged (422).
        let bundleText = try json.requiredString("bundleId")
        let secretText = try json.string("sharedSecret")
        let allowSandbox = try json.bool("allowSandbox") ?? true
        let bundleId = try Self.identifier(bundleText, field: "bundleId")
        let sharedSecret = try Self.sharedSecret(secretText)
        do {
            let app = try await self.services.catalog.createApp(
                publisherId: publisherId, bundleId: bundleId, sharedSecret: sharedSecret, allowSandbox: allowSandbox
            )
            context.logger.info("app created", metadata: [
                "publisher": "\(publisherId.lowercasedString)", "app": "\(app.id.lowercasedString)", "bundle": "\(app.bundleId)",
                "allow_sandbox": "\(app.allowSandbox)", "shared_secret": "\(app.sharedSecret != nil)",
            ])
            return JSONBody.response(.created, AppView(
                id: app.id.lowercasedString, publisherId: publisherId.lowercasedString, bundleId: app.bundleId,
                allowSandbox: app.allowSandbox
            ))
        } catch CatalogError.unknownPublisher {
            throw APIError.notFound
        } catch CatalogError.conflict {
            throw APIError(.conflict, code: "conflict", "the publisher already has an app with this bundleId", field: "bundleId")
        }
    }

    /// Changes a registered app's `sharedSecret` (`null` or `""` removes it) or `allowSandbox`: a wrong secret
    /// dead-letters its jobs `shared_secret_mismatch`, to be requeued once it is right. The bundle id is
    /// matched in any case, as Apple's are.
    @Sendable func updateApp(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        guard let publisherId = context.parameters.get("publisherId").flatMap(UUID.init(uuidString:)),
            let bundleId = context.parameters.get("bundleId")
        else { throw APIError.notFound }
        let json = try await JSONObject.read(request)
        try json.refuseUnknown(["sharedSecret", "allowSandbox"])
        let secretText: String?? = json.has("sharedSecret") ? .some(try json.string("sharedSecret")) : nil
        let allowSandbox = try json.bool("allowSandbox")
        let sharedSecret = try secretText.map { try Self.sharedSecret($0) }
        guard let app = try await self.services.catalog.updateApp(
            publisherId: publisherId, bundleId: bundleId, sharedSecret: sharedSecret, allowSandbox: allowSandbox
        ) else { throw APIError.notFound }
        context.logger.info("app updated", metadata: [
            "publisher": "\(publisherId.lowercasedString)", "app": "\(app.id.lowercasedString)", "bundle": "\(app.bundleId)",
            "allow_sandbox": "\(app.allowSandbox)", "shared_secret": "\(app.sharedSecret != nil)",
            "changed": "\([sharedSecret.map { _ in "sharedSecret" }, allowSandbox.map { _ in "allowSandbox" }].compactMap { $0 }.joined(separator: ","))",
        ])
        return JSONBody.response(.ok, AppView(
            id: app.id.lowercasedString, publisherId: publisherId.lowercasedString, bundleId: app.bundleId, allowSandbox: app.allowSandbox
        ))
    }

    /// An App Store shared secret as sent: `nil` for none (`null` or empty). Apple's are 32 hexadecimal
    /// characters; at most 256 printable ones are taken, since every worker keeps them in memory and sends
    /// them with every verification.
    static func sharedSecret(_ text: String?) throws -> String? {
        guard let text, !text.isEmpty else { return nil }
        guard text.utf8.count <= 256, text.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
            throw APIError.invalid(
                "sharedSecret", code: "invalid_sharedSecret", "sharedSecret must be at most 256 printable characters without spaces"
            )
        }
        return text
    }

    // MARK: Products

    struct ProductView: Encodable {
        let id: String
        let publisherId: String
        let bundleId: String
        let productId: String
        let offerId: String
        let kind: String
        let title: String
        let description: String?
        let coins: Int?
        let durationDays: Int?
        let enabled: Bool
        let createdAt: Int
        let updatedAt: Int

        init(_ product: Product) {
            self.id = product.id.lowercasedString
            self.publisherId = product.publisherId.lowercasedString
            self.bundleId = product.bundleId
            self.productId = product.productId
            self.offerId = product.offerId
            self.kind = product.kind.rawValue
            self.title = product.title
            self.description = product.description
            self.coins = product.coins
            self.durationDays = product.durationDays
            self.enabled = product.enabled
            self.createdAt = Int(product.createdAt.timeIntervalSince1970)
            self.updatedAt = Int(product.updatedAt.timeIntervalSince1970)
        }
    }

    @Sendable func createProduct(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let json = try await JSONObject.read(request)
        // Every field is read first (400 for one missing or ill-typed), then judged (422), as a payment is.
        let publisherText = try json.requiredString("publisherId")
        let bundleText = try json.requiredString("bundleId")
        let productText = try json.requiredString("productId")
        let offerText = try json.string("offerId")
        let kindText = try json.requiredString("kind")
        let titleText = try json.requiredString("title")
        let descriptionText = try Self.description(json)
        let coins = try json.int("coins")
        let durationDays = try json.int("durationDays")
        let enabled = try json.bool("enabled") ?? true
        guard let publisherId = UUID(uuidString: publisherText) else {
            throw APIError.invalid("publisherId", code: "unknown_publisher", "publisherId is not a publisher")
        }
        let bundleId = try Self.identifier(bundleText, field: "bundleId")
        let productId = try Self.identifier(productText, field: "productId")
        let offerId = try offerText.map { try FieldRules.offerId($0) } ?? Self.defaultOfferId(productId)
        guard let kind = ProductKind(rawValue: kindText) else {
            throw APIError.invalid("kind", code: "invalid_kind", "kind must be consumable, non_consumable, auto_renewable or non_renewing")
        }
        let title = try Self.bounded(titleText, field: "title")
        let description = try descriptionText.flatMap { $0 }.map { try Self.bounded($0, field: "description") }
        let amounts = try Self.checkAmounts(kind: kind, coins: coins, durationDays: durationDays)
        do {
            let product = try await self.services.catalog.createProduct(ProductDraft(
                publisherId: publisherId, bundleId: bundleId, productId: productId, offerId: offerId, kind: kind, title: title,
                description: description, coins: amounts.coins, durationDays: amounts.durationDays, enabled: enabled
            ))
            // The offer may be cached with the products other apps sell under it, or as none of the publisher's.
            self.services.offers.remove(OfferKey(publisherId: product.publisherId, offerId: product.offerId))
            self.services.offerIds.remove(product.publisherId)
            context.logger.info("product created", metadata: Self.logMetadata(product))
            return JSONBody.response(.created, ProductView(product))
        } catch CatalogError.unknownPublisher {
            throw APIError.invalid("publisherId", code: "unknown_publisher", "publisherId is not a publisher")
        } catch CatalogError.conflict(let field) {
            throw APIError(.conflict, code: "conflict", "the app already has a product with this \(field)", field: field)
        }
    }

    struct ProductList: Encodable {
        let products: [ProductView]
        /// Where the next page starts (its `after`); absent on the last page, and when no `limit` was asked.
        let next: String?
    }

    /// Every product of a publisher, in the order they were created; with `limit`, a page of them, and `next` when
    /// more follow (`after` gives the page after it).
    @Sendable func listProducts(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        // Empty is missing, as an empty string field of a body is.
        guard let raw = request.uri.queryParameters["publisherId"].map(String.init), !raw.isEmpty else {
            throw APIError.missingField("publisherId")
        }
        guard let publisherId = UUID(uuidString: raw) else { throw APIError.notFound }
        guard try await self.services.catalog.publisherExists(publisherId) else { throw APIError.notFound }
        let limit = try Self.pageLimit(request)
        var after: UUID?
        if let text = request.uri.queryParameters["after"] {
            // A product of this publisher: an id that is not one would silently give an empty page.
            guard let id = UUID(uuidString: String(text)), try await self.services.catalog.product(id: id)?.publisherId == publisherId else {
                throw APIError.invalidType("after", expected: "the `next` of a page of this publisher's products")
            }
            after = id
        }
        var products = try await self.services.catalog.products(publisherId: publisherId, after: after, limit: limit.map { $0 + 1 })
        var next: String?
        if let limit, products.count > limit {
            products.removeLast(products.count - limit)
            next = products.last?.id.lowercasedString
        }
        return JSONBody.response(.ok, ProductList(products: products.map(ProductView.init), next: next))
    }

    /// The `limit` of a page: `nil` when not asked. One that is not a whole number is refused (an operator's script
    /// must not read 100 as "all"); whole numbers are clamped to 1-1000.
    static func pageLimit(_ request: Request) throws -> Int? {
        guard let text = request.uri.queryParameters["limit"] else { return nil }
        guard let asked = Int(String(text)) else { throw APIError.invalidType("limit", expected: "a whole number from 1 to 1000") }
        return min(max(asked, 1), 1000)
    }

    /// Most characters of a product's `title` and `description`: each is kept in every API's and worker's
    /// offer cache, so a body's megabyte must not end up there.
    static let textLimits = ["title": 200, "description": 2000]

    static func bounded(_ text: String, field: String) throws -> String {
        guard let limit = Self.textLimits[field], text.unicodeScalars.count > limit else { return text }
        throw APIError.invalid(field, code: "invalid_\(field)", "\(field) must be at most \(limit) characters")
    }

    /// A body's `description` as sent (its length is judged later): `nil` when absent, `.some(nil)` when
    /// `null` or empty (no description).
    static func description(_ json: JSONObject) throws -> String?? {
        guard json.has("description") else { return nil }
        guard let text = try json.string("description"), !text.isEmpty else { return .some(nil) }
        return text
    }

    /// What a log line says of a product: which it is and what it sells, never its texts.
    static func logMetadata(_ product: Product) -> Logger.Metadata {
        [
            "product": "\(product.id.lowercasedString)", "publisher": "\(product.publisherId.lowercasedString)", "bundle": "\(product.bundleId)",
            "offer": "\(product.offerId)", "kind": "\(product.kind.rawValue)", "enabled": "\(product.enabled)",
            "coins": "\(product.coins.map(String.init) ?? "-")", "duration_days": "\(product.durationDays.map(String.init) ?? "-")",
        ]
    }

    /// The members of a product as ``ProductView`` shows it.
    static let productFields: Set<String> = [
        "id", "publisherId", "bundleId", "productId", "offerId", "kind", "title", "description", "coins", "durationDays", "enabled",
        "createdAt", "updatedAt",
    ]

    @Sendable func updateProduct(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        guard let id = context.parameters.get("productId").flatMap(UUID.init(uuidString:)),
            let existing = try await self.services.catalog.product(id: id)
        else { throw APIError.notFound }
        let json = try await JSONObject.read(request)
        // A product as listed may be sent back whole: its timestamps are the server's, and its identity must match.
        try json.refuseUnknown(Self.productFields)
        // Every field is read first (400 for one ill-typed), then judged (422), as at creation.
        let identity = try [
            ("id", existing.id.lowercasedString), ("publisherId", existing.publisherId.lowercasedString), ("bundleId", existing.bundleId), ("productId", existing.productId),
            ("offerId", existing.offerId), ("kind", existing.kind.rawValue),
        ].map { field, current in (field, current, try json.string(field)) }
        let titleText = try json.string("title")
        let descriptionText = try Self.description(json)
        let coins = try json.int("coins")
        let durationDays = try json.int("durationDays")
        let enabled = try json.bool("enabled")
        // What identifies a product (and the grants made under it) is fixed; sending it back unchanged is fine, and
        // ids and bundle ids in any case (a bundle id is matched in any case, and the app's may differ from the request's).
        for case let (field, current, sent?) in identity
        where ["id", "publisherId", "bundleId"].contains(field) ? sent.lowercased() != current.lowercased() : sent != current {
            throw APIError.invalid(field, code: "immutable_field", "\(field) cannot be changed; create another product instead")
        }
        let title = try titleText.map { try Self.bounded($0, field: "title") }
        guard title?.isEmpty != true else { throw APIError.invalid("title", code: "invalid_title", "title must not be empty") }
        let amounts = try Self.checkAmounts(kind: existing.kind, coins: coins, durationDays: durationDays, patch: true)
        let patch = ProductPatch(
            enabled: enabled, title: title, description: try descriptionText.map { try $0.map { try Self.bounded($0, field: "description") } ?? "" },
            coins: amounts.coins, durationDays: amounts.durationDays
        )
        let product = try await self.services.catalog.updateProduct(id: id, patch)
        self.services.offers.remove(OfferKey(publisherId: product.publisherId, offerId: product.offerId))
        var metadata = Self.logMetadata(product)
        metadata["changed"] = "\(patch.fieldNames.joined(separator: ","))"
        context.logger.info("product updated", metadata: metadata)
        return JSONBody.response(.ok, ProductView(product))
    }

    // MARK: Queue

    @Sendable func queue(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        JSONBody.response(.ok, try await self.services.queue.counts())
    }

    @Sendable func deadLetters(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        let limit = try Self.pageLimit(request) ?? 100
        let after = request.uri.queryParameters["after"]
        if let after, !DeadLetterPage.isCursor(after) {
            throw APIError.invalidType("after", expected: "the `next` of a page of dead letters")
        }
        return JSONBody.response(.ok, try await self.services.queue.deadLetters(limit: limit, after: after.map(String.init)))
    }

    struct Requeued: Encodable {
        let jobId: String
        let status: String
    }

    @Sendable func requeue(_ request: Request, context: TollgateRequestContext) async throws -> Response {
        guard let jobId = context.parameters.get("jobId")?.lowercased(), let record = try await self.services.queue.record(jobId: jobId) else {
            throw APIError.notFound
        }
        let outcome = try await self.services.queue.requeue(
            jobId: jobId, publisherId: record.publisherId, customerEmail: record.customerEmail, offerId: record.offerId,
            now: self.services.queue.clock.nowMilliseconds(), keyTTLSeconds: self.services.keyTTLSeconds
        )
        switch outcome {
        case .requeued:
            context.logger.info("dead letter requeued", metadata: ["job": "\(jobId)"])
            return JSONBody.response(.ok, Requeued(jobId: jobId, status: JobStatus.queued.rawValue))
        case .notFailed(let status):
            // Requeuing twice is harmless: the second call finds the job already back in the queue.
            return JSONBody.response(.ok, Requeued(jobId: jobId, status: status.rawValue))
        case .missing:
            throw APIError.notFound
        }
    }

    // MARK: Helpers

    /// Bundle and product identifiers: 1-255 printable characters without spaces.
    static func identifier(_ text: String, field: String) throws -> String {
        guard (1...255).contains(text.utf8.count), text.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
            throw APIError.invalid(field, code: "invalid_\(field)", "\(field) must be 1-255 printable characters without spaces")
        }
        return text
    }

    /// `offerId` defaults to `productId`, which may be longer than an offer id can be.
    private static func defaultOfferId(_ productId: String) throws -> String {
        guard productId.utf8.count <= FieldRules.offerIdMaxLength else {
            throw APIError.invalid(
                "offerId", code: "invalid_offer_id",
                "offerId defaults to productId, which is longer than \(FieldRules.offerIdMaxLength) characters: give an offerId"
            )
        }
        return productId
    }

    /// `coins` belongs to consumables and `durationDays` to non-renewing products: each is required at
    /// creation and range-checked for its kind, and ignored (never stored) for any other kind, at creation as
    /// in a patch. In a patch, absent means unchanged.
    static func checkAmounts(kind: ProductKind, coins: Int?, durationDays: Int?, patch: Bool = false) throws -> (coins: Int?, durationDays: Int?) {
        (
            try Self.amount(coins, field: "coins", appliesTo: kind == .consumable, range: 1...1_000_000_000, code: "invalid_coins", patch: patch),
            try Self.amount(
                durationDays, field: "durationDays", appliesTo: kind == .nonRenewing, range: 1...36_500, code: "invalid_duration", patch: patch
            )
        )
    }

    /// One amount where it applies: required (unless patching) and within `range`; elsewhere `nil`.
    private static func amount(_ value: Int?, field: String, appliesTo applies: Bool, range: ClosedRange<Int>, code: String, patch: Bool) throws -> Int? {
        guard applies else { return nil }
        guard let value else {
            if patch { return nil }
            throw APIError.missingField(field)
        }
        guard range.contains(value) else {
            throw APIError.invalid(field, code: code, "\(field) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }
}
