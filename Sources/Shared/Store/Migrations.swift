/// The schema, as an ordered list of versioned migrations. Append; never edit one that has shipped.
///
/// Compiled into the binary (not resource files) so `tollgate-api migrate` works wherever the binary is.
public enum Migrations {
    /// One migration.
    public struct Migration: Sendable {
        /// Its version; applied in increasing order, recorded in `schema_migrations`.
        public let version: Int
        /// A short name.
        public let name: String
        /// The SQL, run in one transaction.
        public let sql: String
    }

    /// Every migration, oldest first.
    public static let all: [Migration] = [
        Migration(version: 1, name: "catalog", sql: """
            CREATE TABLE publishers (
                id                  uuid PRIMARY KEY,
                name                text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
                token_hash          bytea NOT NULL UNIQUE,
                basic_username      text NOT NULL UNIQUE,
                basic_password_hash bytea NOT NULL,
                enabled             boolean NOT NULL DEFAULT true,
                created_at          timestamptz NOT NULL DEFAULT now(),
                updated_at          timestamptz NOT NULL DEFAULT now()
            );

            CREATE TABLE apps (
                id            uuid PRIMARY KEY,
                publisher_id  uuid NOT NULL REFERENCES publishers (id),
                bundle_id     text NOT NULL,
                shared_secret text,
                allow_sandbox boolean NOT NULL DEFAULT true,
                created_at    timestamptz NOT NULL DEFAULT now(),
                UNIQUE (publisher_id, bundle_id)
            );

            CREATE TABLE products (
                id            uuid PRIMARY KEY,
                publisher_id  uuid NOT NULL REFERENCES publishers (id),
                app_id        uuid NOT NULL REFERENCES apps (id),
                product_id    text NOT NULL,
                offer_id      text NOT NULL,
                kind          text NOT NULL CHECK (kind IN ('consumable', 'non_consumable', 'auto_renewable', 'non_renewing')),
                title         text NOT NULL,
                description   text,
                coins         integer CHECK (coins IS NULL OR coins > 0),
                duration_days integer CHECK (duration_days IS NULL OR duration_days > 0),
                enabled       boolean NOT NULL DEFAULT true,
                created_at    timestamptz NOT NULL DEFAULT now(),
                updated_at    timestamptz NOT NULL DEFAULT now(),
                UNIQUE (app_id, product_id),
                UNIQUE (app_id, offer_id),
                CHECK (kind <> 'consumable' OR coins IS NOT NULL),
                CHECK (kind <> 'non_renewing' OR duration_days IS NOT NULL)
            );
            CREATE INDEX products_publisher_offer ON products (publisher_id, offer_id);
            """),
        Migration(version: 2, name: "ledger", sql: """
            -- One row per Apple transaction: received_receipt -> verified -> fulfilled | invalidated.
            CREATE TABLE transactions (
                id                      bigserial PRIMARY KEY,
                publisher_id            uuid NOT NULL REFERENCES publishers (id),
                app_id                  uuid NOT NULL REFERENCES apps (id),
                product_ref             uuid REFERENCES products (id),
                transaction_id          text NOT NULL,
                original_transaction_id text NOT NULL,
                product_id              text NOT NULL,
                customer_email          text NOT NULL,
                offer_id                text NOT NULL,
                environment             text NOT NULL CHECK (environment IN ('Production', 'Sandbox')),
                job_id                  text,
                receipt_digest          text,
                state                   text NOT NULL CHECK (state IN ('received_receipt', 'verified', 'fulfilled', 'invalidated')),
                purchase_date           timestamptz,
                expires_date            timestamptz,
                cancellation_date       timestamptz,
                granted_until           timestamptz,
                received_at             timestamptz NOT NULL,
                verified_at             timestamptz,
                fulfilled_at            timestamptz,
                invalidated_at          timestamptz,
                last_error              text,
                UNIQUE (app_id, transaction_id)
            );
            CREATE INDEX transactions_customer ON transactions (publisher_id, customer_email);
            CREATE INDEX transactions_original ON transactions (publisher_id, original_transaction_id);

            -- Who owns a purchase: one Apple transaction (or original transaction) per publisher belongs to
            -- the first customer it was granted to. The primary key decides races, not a read-then-write.
            CREATE TABLE claims (
                publisher_id   uuid NOT NULL REFERENCES publishers (id),
                claim_key      text NOT NULL,
                customer_email text NOT NULL,
                created_at     timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (publisher_id, claim_key)
            );

            CREATE TABLE entitlements (
                id                    bigserial PRIMARY KEY,
                publisher_id          uuid NOT NULL REFERENCES publishers (id),
                customer_email        text NOT NULL,
                offer_id              text NOT NULL,
                product_ref           uuid REFERENCES products (id),
                expires_at            timestamptz,
                granted_by            bigint NOT NULL REFERENCES transactions (id),
                revoked_at            timestamptz,
                created_at            timestamptz NOT NULL DEFAULT now(),
                updated_at            timestamptz NOT NULL DEFAULT now(),
                UNIQUE (publisher_id, customer_email, offer_id)
            );

            -- One credit per transaction, and at most one reversal of it.
            CREATE TABLE wallet_entries (
                id              bigserial PRIMARY KEY,
                publisher_id    uuid NOT NULL REFERENCES publishers (id),
                customer_email  text NOT NULL,
                transaction_ref bigint NOT NULL REFERENCES transactions (id),
                kind            text NOT NULL CHECK (kind IN ('credit', 'reversal')),
                coins           integer NOT NULL,
                created_at      timestamptz NOT NULL DEFAULT now(),
                UNIQUE (transaction_ref, kind)
            );
            CREATE INDEX wallet_entries_customer ON wallet_entries (publisher_id, customer_email);
            """),
        Migration(version: 3, name: "job lookup", sql: """
            -- A job's outcome stays readable from the ledger after its Redis status has expired.
            CREATE INDEX transactions_job ON transactions (job_id) WHERE job_id IS NOT NULL;
            """),
        Migration(version: 4, name: "catalog rows are permanent", sql: """
            -- Every grant inserted rows whose foreign keys point at the same few catalog rows (the publisher,
            -- its app, the product). Each check takes a KEY SHARE lock on that row, and hundreds of
            -- concurrent grants sharing one row turned the locks into MultiXact churn: a fifth of
            -- PostgreSQL's CPU per grant. The ledger's references to the catalog are kept instead by a
            -- catalog that never loses or renumbers a row (refused below; the admin API disables, it never
            -- deletes), and every id a grant writes was read from the catalog. References from ledger row
            -- to ledger row (granted_by, transaction_ref) stay foreign keys: they lock the grant's own rows.
            ALTER TABLE claims DROP CONSTRAINT claims_publisher_id_fkey;
            ALTER TABLE transactions
                DROP CONSTRAINT transactions_publisher_id_fkey,
                DROP CONSTRAINT transactions_app_id_fkey,
                DROP CONSTRAINT transactions_product_ref_fkey;
            ALTER TABLE entitlements
                DROP CONSTRAINT entitlements_publisher_id_fkey,
                DROP CONSTRAINT entitlements_product_ref_fkey;
            ALTER TABLE wallet_entries DROP CONSTRAINT wallet_entries_publisher_id_fkey;

            CREATE FUNCTION tollgate_catalog_rows_are_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION 'rows of % are never deleted or renumbered: the ledger refers to them (disable instead)',
                    TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
            END
            $$;
            CREATE TRIGGER publishers_rows_are_permanent BEFORE DELETE OR TRUNCATE ON publishers
                FOR EACH STATEMENT EXECUTE FUNCTION tollgate_catalog_rows_are_permanent();
            CREATE TRIGGER publishers_ids_are_permanent BEFORE UPDATE OF id ON publishers
                FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION tollgate_catalog_rows_are_permanent();
            CREATE TRIGGER apps_rows_are_permanent BEFORE DELETE OR TRUNCATE ON apps
                FOR EACH STATEMENT EXECUTE FUNCTION tollgate_catalog_rows_are_permanent();
            CREATE TRIGGER apps_ids_are_permanent BEFORE UPDATE OF id ON apps
                FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION tollgate_catalog_rows_are_permanent();
            CREATE TRIGGER products_rows_are_permanent BEFORE DELETE OR TRUNCATE ON products
                FOR EACH STATEMENT EXECUTE FUNCTION tollgate_catalog_rows_are_permanent();
            CREATE TRIGGER products_ids_are_permanent BEFORE UPDATE OF id ON products
                FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION tollgate_catalog_rows_are_permanent();
            """),
        Migration(version: 5, name: "a pass keeps the days it was sold with", sql: """
            -- A non-renewing pass's days, as the product said when it was granted: a refund of another pass
            -- restacks the rest with these, not with whatever the product says by then. Rows granted before
            -- this migration have none and use the product's.
            ALTER TABLE transactions ADD COLUMN duration_days integer;
            """),
        Migration(version: 6, name: "an app a product names before it is registered", sql: """
            -- POST /admin/v1/products names its app by bundleId; one not registered yet is created with it,
            -- without a shared secret (registered false). Registering it afterwards fills in its settings.
            ALTER TABLE apps ADD COLUMN registered boolean NOT NULL DEFAULT true;
            """),
        Migration(version: 7, name: "jobs that found their purchase granted", sql: """
            -- A ledger row names the job that brought its transaction in (job_id). A job that ends granted
            -- on a row another job or another receipt's evidence brought in (a renewal, the same purchase
            -- submitted again in other bytes) is recorded here, in the grant's transaction: a replay of it
            -- (a crash between the commit and recording the outcome) finds its grant without asking Apple
            -- again, and its outcome stays readable after its Redis status has expired.
            CREATE TABLE granted_jobs (
                job_id          text PRIMARY KEY,
                transaction_ref bigint NOT NULL REFERENCES transactions (id),
                offer_id        text NOT NULL,
                granted_until   timestamptz,
                granted_at      timestamptz NOT NULL DEFAULT now()
            );
            CREATE INDEX granted_jobs_transaction ON granted_jobs (transaction_ref);
            """),
        Migration(version: 8, name: "refunds seen before their purchase is granted", sql: """
            -- Every refund a verified answer lists, whether or not the ledger holds its transaction yet. A
            -- refund seen in one receipt while the purchase's first grant is in flight, or before it runs with
            -- an answer Apple gave before the refund, finds no ledger row to revoke; the grant finds it here
            -- and grants nothing. (Both take the purchase's advisory lock first, so one of them sees the other.)
            CREATE TABLE cancellations (
                app_id                  uuid NOT NULL REFERENCES apps (id),
                transaction_id          text NOT NULL,
                original_transaction_id text NOT NULL,
                cancellation_date       timestamptz NOT NULL,
                seen_at                 timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (app_id, transaction_id)
            );
            CREATE INDEX cancellations_original ON cancellations (app_id, original_transaction_id);
            """),
        Migration(version: 9, name: "when a product was disabled", sql: """
            -- A job accepted before its product was disabled is still granted: the customer paid while it was
            -- on sale. That moment was read from updated_at, which any later change (a new title) moves past
            -- jobs accepted while the product was off sale. Products disabled before this migration count as
            -- disabled at their last change, as before.
            ALTER TABLE products ADD COLUMN disabled_at timestamptz;
            UPDATE products SET disabled_at = updated_at WHERE NOT enabled;
            """),
        Migration(version: 10, name: "disabled_at kept by the database", sql: """
            -- During a rolling upgrade an API from before migration 9 may enable and disable a product again
            -- without touching disabled_at: the moment of a newer disable would stay, and a job accepted while
            -- the product was back on sale would be refused. PostgreSQL keeps it now, whoever writes.
            CREATE FUNCTION products_disabled_at() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.enabled THEN
                    NEW.disabled_at := NULL;
                ELSIF TG_OP = 'INSERT' THEN
                    NEW.disabled_at := COALESCE(NEW.disabled_at, now());
                ELSIF OLD.enabled THEN
                    NEW.disabled_at := now();
                ELSE
                    NEW.disabled_at := COALESCE(OLD.disabled_at, NEW.disabled_at);
                END IF;
                RETURN NEW;
            END
            $$;
            CREATE TRIGGER products_disabled_at BEFORE INSERT OR UPDATE ON products
                FOR EACH ROW EXECUTE FUNCTION products_disabled_at();
            -- Disabled by such an API since migration 9: at its last change, as before.
            UPDATE products SET disabled_at = updated_at WHERE NOT enabled AND disabled_at IS NULL;
            """),
    ]
}
