import Foundation

/// Publishers, apps and products in PostgreSQL.
public struct CatalogStore: Sendable {
    private let database: PostgresClient

    /// Creates a store over a client.
    public init(database: PostgresClient) {
        self.database = database
    }

    // MARK: Publishers

    /// Creates a publisher with fresh credentials; the plain secrets exist only in the return value.
    public func createPublisher(name: String) async throws -> (Publisher, PublisherCredentials) {
        let publisher = Publisher(id: UUID(), name: name)
        let credentials = PublisherCredentials.generate()
        try await self.database.query(
            """
            INSERT INTO publishers (id, name, token_hash, basic_username, basic_password_hash)
            VALUES ($1, $2, $3, $4, $5)
            """,
            [
                publisher.id, name, PostgresBytes(PublisherCredentials.hash(credentials.publisherToken)),
                credentials.username, PostgresBytes(PublisherCredentials.hash(credentials.password)),
            ]
        )
        return (publisher, credentials)
    }

    /// The stored hashes of every publisher's current credentials, enabled or not: what the API keeps in memory
    /// to authenticate requests without a round trip (a few hundred bytes per publisher).
    public func publisherAuthRecords() async throws -> [PublisherAuthRecord] {
        try await self.database.query(
            "SELECT id, name, token_hash, basic_username, basic_password_hash, enabled, updated_at FROM publishers"
        ).rows.map(Self.authRecord)
    }

    private static func authRecord(_ row: PostgresRow) throws -> PublisherAuthRecord {
        PublisherAuthRecord(
            publisher: try Self.publisher(row),
            username: try row.decode(String.self, "basic_username"),
            passwordHash: try row.decode(PostgresBytes.self, "basic_password_hash").bytes,
            tokenHash: try row.decode(PostgresBytes.self, "token_hash").bytes,
            changedAt: try row.decode(Date.self, "updated_at")
        )
    }

    /// Whether a publisher exists.
    public func publisherExists(_ id: UUID) async throws -> Bool {
        try await self.publisher(id: id) != nil
    }

    /// One publisher.
    public func publisher(id: UUID) async throws -> Publisher? {
        try await self.database.query("SELECT id, name, enabled FROM publishers WHERE id = $1", [id]).first.map(Self.publisher)
    }

    /// Every publisher, oldest first.
    public func publishers() async throws -> [Publisher] {
        try await self.database.query("SELECT id, name, enabled FROM publishers ORDER BY created_at, id").rows.map(Self.publisher)
    }

    /// Enables or disables a publisher; `nil` when there is no such publisher. Only a change of state moves
    /// `updated_at`, which voids the customer tokens issued before it (``PublisherAuthRecord/changedAt``).
    public func setPublisher(id: UUID, enabled: Bool) async throws -> Publisher? {
        try await self.database.query(
            """
            UPDATE publishers SET enabled = $2, updated_at = CASE WHEN enabled = $2 THEN updated_at ELSE now() END
            WHERE id = $1 RETURNING id, name, enabled
            """,
            [id, enabled]
        ).first.map(Self.publisher)
    }

    /// Replaces both of a publisher's credentials with fresh ones; the old ones stop matching at once (API
    /// processes forget them within their cache lifetime). `nil` when there is no such publisher.
    public func rotateCredentials(id: UUID) async throws -> (Publisher, PublisherCredentials)? {
        let credentials = PublisherCredentials.generate()
        let result = try await self.database.query(
            """
            UPDATE publishers SET token_hash = $2, basic_username = $3, basic_password_hash = $4, updated_at = now()
            WHERE id = $1 RETURNING id, name, enabled
            """,
            [
                id, PostgresBytes(PublisherCredentials.hash(credentials.publisherToken)), credentials.username,
                PostgresBytes(PublisherCredentials.hash(credentials.password)),
            ]
        )
        return try result.first.map { (try Self.publisher($0), credentials) }
    }

    private static func publisher(_ row: PostgresRow) throws -> Publisher {
        Publisher(id: try row.decode(UUID.self, "id"), name: try row.decode(String.self, "name"), enabled: try row.decode(Bool.self, "enabled"))
    }

    // MARK: Apps

    /// Adds an app to a publisher.
    ///
    /// Bundle ids name one app whatever their case, as Apple's do and as the worker matches a receipt's
    /// (``appLockStatement``, ``sameAppCondition``): another case of a registered app's id is a conflict.
    public func createApp(publisherId: UUID, bundleId: String, sharedSecret: String?, allowSandbox: Bool) async throws -> App {
        guard try await self.publisherExists(publisherId) else { throw CatalogError.unknownPublisher }
        let id = try await self.database.withTransaction { session -> UUID in
            let lock = Self.appLockStatement(publisherId: publisherId, bundleId: bundleId)
            try await session.query(lock.0, lock.1)
            let existing = try await session.query(
                "SELECT id, registered FROM apps a WHERE \(Self.sameAppCondition) LIMIT 1", [publisherId, bundleId]
            ).first
            guard let existing else {
                let id = UUID()
                try await session.query(
                    "INSERT INTO apps (id, publisher_id, bundle_id, shared_secret, allow_sandbox) VALUES ($1, $2, $3, $4, $5)",
                    [id, publisherId, bundleId, sharedSecret, allowSandbox]
                )
                return id
            }
            // An app a product created before it was registered takes these settings, and the id as registered.
            guard !(try existing.decode(Bool.self, "registered")) else { throw CatalogError.conflict("bundleId") }
            let id = try existing.decode(UUID.self, "id")
            try await session.query(
                "UPDATE apps SET bundle_id = $2, shared_secret = $3, allow_sandbox = $4, registered = true WHERE id = $1",
                [id, bundleId, sharedSecret, allowSandbox]
            )
            return id
        }
        return App(id: id, publisherId: publisherId, bundleId: bundleId, sharedSecret: sharedSecret, allowSandbox: allowSandbox)
    }

    /// Serialises creating a publisher's app by bundle id, in any case, until the transaction ends.
    private static func appLockStatement(publisherId: UUID, bundleId: String) -> (String, [any PostgresEncodable]) {
        ("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", ["app|\(publisherId.lowercasedString)|\(bundleId.lowercased())"])
    }

    /// The publisher's (`$1`) app `a` with the bundle id `$2` in any case; the exact case first, should a
    /// database from before this rule hold both.
    private static let sameAppCondition = "a.publisher_id = $1 AND lower(a.bundle_id) = lower($2) ORDER BY a.bundle_id = $2 DESC, a.created_at"

    /// Changes the App Store settings of the publisher's app with this bundle id (in any case): `nil` leaves
    /// a field as it is, `sharedSecret: .some(nil)` removes the secret. `nil` when there is no such app.
    public func updateApp(publisherId: UUID, bundleId: String, sharedSecret: String??, allowSandbox: Bool?) async throws -> App? {
        try await self.database.query(
            """
            UPDATE apps SET shared_secret = CASE WHEN $3 THEN $4 ELSE shared_secret END, allow_sandbox = COALESCE($5, allow_sandbox)
            WHERE id = (SELECT a.id FROM apps a WHERE \(Self.sameAppCondition) LIMIT 1)
            RETURNING id, publisher_id, bundle_id, shared_secret, allow_sandbox
            """,
            [publisherId, bundleId, sharedSecret != nil, sharedSecret ?? nil, allowSandbox]
        ).rows.first.map(Self.app)
    }

    /// A publisher's apps.
    public func apps(publisherId: UUID) async throws -> [App] {
        try await self.database.query(
            "SELECT id, publisher_id, bundle_id, shared_secret, allow_sandbox FROM apps WHERE publisher_id = $1 ORDER BY created_at",
            [publisherId]
        ).rows.map(Self.app)
    }

    // MARK: Products

    /// Columns of a product joined with its app's bundle id.
    private static let productColumns = """
        p.id, p.publisher_id, p.app_id, a.bundle_id, p.product_id, p.offer_id, p.kind, p.title, p.description,
        p.coins, p.duration_days, p.enabled, p.disabled_at, p.created_at, p.updated_at
        """

    /// Adds a product to one of a publisher's apps, creating the app (unregistered: no shared secret, sandbox
    /// allowed) when the publisher has none with that bundle id yet, in the same transaction.
    public func createProduct(_ draft: ProductDraft) async throws -> Product {
        guard try await self.publisherExists(draft.publisherId) else { throw CatalogError.unknownPublisher }
        do {
            return try await self.database.withTransaction { session in
                let lock = Self.appLockStatement(publisherId: draft.publisherId, bundleId: draft.bundleId)
                try await session.query(lock.0, lock.1)
                try await session.query(
                    """
                    INSERT INTO apps (id, publisher_id, bundle_id, registered)
                    SELECT $3, $1, $2, false WHERE NOT EXISTS (SELECT 1 FROM apps a WHERE \(Self.sameAppCondition))
                    """,
                    [draft.publisherId, draft.bundleId, UUID()]
                )
                let result = try await session.query(
                    """
                    WITH inserted AS (
                        INSERT INTO products (id, publisher_id, app_id, product_id, offer_id, kind, title, description, coins, duration_days, enabled, disabled_at)
                        SELECT $3, $1, a.id, $4, $5, $6, $7, $8, $9, $10, $11, CASE WHEN $11 THEN NULL ELSE now() END
                        FROM apps a WHERE \(Self.sameAppCondition) LIMIT 1
                        RETURNING *
                    )
                    SELECT \(Self.productColumns) FROM inserted p JOIN apps a ON a.id = p.app_id
                    """,
                    [
                        draft.publisherId, draft.bundleId, UUID(), draft.productId, draft.offerId, draft.kind.rawValue, draft.title,
                        draft.description, draft.coins, draft.durationDays, draft.enabled,
                    ]
                )
                // The app exists by now, and catalog rows are never deleted: there is always a row.
                guard let row = result.first else { throw CatalogError.unknownPublisher }
                return try Self.product(row)
            }
        } catch let error as PostgresError where error.isUniqueViolation {
            throw CatalogError.conflict(error.message.contains("offer") ? "offerId" : "productId")
        }
    }

    /// A publisher's products, oldest first.
    public func products(publisherId: UUID) async throws -> [Product] {
        try await self.products(publisherId: publisherId, after: nil, limit: nil)
    }

    /// The publisher's products in the order they were created, those after the product `after` only (`nil`: from
    /// the first; an id that is not one of the publisher's products gives none), and at most `limit` (`nil`: all).
    public func products(publisherId: UUID, after: UUID?, limit: Int?) async throws -> [Product] {
        try await self.database.query(
            """
            SELECT \(Self.productColumns) FROM products p JOIN apps a ON a.id = p.app_id
            WHERE p.publisher_id = $1
              AND ($2::uuid IS NULL OR (p.created_at, p.id) > (SELECT created_at, id FROM products WHERE id = $2 AND publisher_id = $1))
            ORDER BY p.created_at, p.id LIMIT $3
            """,
            [publisherId, after, limit]
        ).rows.map(Self.product)
    }

    /// One product.
    public func product(id: UUID) async throws -> Product? {
        try await self.database.query(
            "SELECT \(Self.productColumns) FROM products p JOIN apps a ON a.id = p.app_id WHERE p.id = $1", [id]
        ).rows.first.map(Self.product)
    }

    /// Changes the given fields of a product; `nil` fields stay as they are.
    public func updateProduct(id: UUID, _ patch: ProductPatch) async throws -> Product {
        let result = try await self.database.query(
            """
            WITH updated AS (
                UPDATE products SET
                    enabled = COALESCE($2, enabled), title = COALESCE($3, title), description = NULLIF(COALESCE($4, description), ''),
                    coins = COALESCE($5, coins), duration_days = COALESCE($6, duration_days), updated_at = now(),
                    -- Moved only by disabling (the old values are read here): a title changed later keeps it.
                    disabled_at = CASE WHEN COALESCE($2, enabled) THEN NULL WHEN enabled THEN now() ELSE disabled_at END
                WHERE id = $1 RETURNING *
            )
            SELECT \(Self.productColumns) FROM updated p JOIN apps a ON a.id = p.app_id
            """,
            [id, patch.enabled, patch.title, patch.description, patch.coins, patch.durationDays]
        )
        guard let row = result.first else { throw CatalogError.unknownProduct }
        return try Self.product(row)
    }

    /// The publisher's products that unlock an offer, in every app, enabled or not.
    public func products(publisherId: UUID, offerId: String) async throws -> [Product] {
        try await self.database.query(
            "SELECT \(Self.productColumns) FROM products p JOIN apps a ON a.id = p.app_id WHERE p.publisher_id = $1 AND p.offer_id = $2",
            [publisherId, offerId]
        ).rows.map(Self.product)
    }

    /// Every offer id the publisher has a product for, in any app, enabled or not.
    public func offerIds(publisherId: UUID) async throws -> Set<String> {
        Set(try await self.database.query("SELECT DISTINCT offer_id FROM products WHERE publisher_id = $1", [publisherId]).rows.map {
            try $0.decode(String.self, "offer_id")
        })
    }

    private static func app(_ row: PostgresRow) throws -> App {
        App(
            id: try row.decode(UUID.self, "id"), publisherId: try row.decode(UUID.self, "publisher_id"),
            bundleId: try row.decode(String.self, "bundle_id"), sharedSecret: try row.decode(String?.self, "shared_secret"),
            allowSandbox: try row.decode(Bool.self, "allow_sandbox")
        )
    }

    private static func product(_ row: PostgresRow) throws -> Product {
        guard let kind = ProductKind(rawValue: try row.decode(String.self, "kind")) else {
            throw PostgresError(.decoding, "unknown product kind")
        }
        return Product(
            id: try row.decode(UUID.self, "id"), publisherId: try row.decode(UUID.self, "publisher_id"),
            appId: try row.decode(UUID.self, "app_id"), bundleId: try row.decode(String.self, "bundle_id"),
            productId: try row.decode(String.self, "product_id"), offerId: try row.decode(String.self, "offer_id"),
            kind: kind, title: try row.decode(String.self, "title"), description: try row.decode(String?.self, "description"),
            coins: try row.decode(Int?.self, "coins"), durationDays: try row.decode(Int?.self, "duration_days"),
            enabled: try row.decode(Bool.self, "enabled"), disabledAt: try row.decode(Date?.self, "disabled_at"),
            createdAt: try row.decode(Date.self, "created_at"), updatedAt: try row.decode(Date.self, "updated_at")
        )
    }
}
