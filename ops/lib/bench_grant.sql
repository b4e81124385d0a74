-- pgbench reference for ops/bench: the SQL of one grant of a non-consumable, statement for statement as
-- GrantStore.grant runs it (one transaction; pgbench sends each statement in its own round trip, where
-- GrantStore pipelines them into two). Variables: pub, app, prod (uuids, -D).
-- A random 12-digit number stands for the Apple transaction id and the customer.
\set n random(100000000000, 999999999999)
BEGIN;
SELECT pg_advisory_xact_lock(hashtextextended('purchase|' || :pub || '|transaction:' || :n, 0));
SELECT pg_advisory_xact_lock(hashtextextended(:pub || '|c' || :n || '@bench.example|BENCH_PREMIUM', 0));
WITH attempt AS (
    INSERT INTO claims (publisher_id, claim_key, customer_email) VALUES (:pub, 'transaction:' || :n, 'c' || :n || '@bench.example')
    ON CONFLICT DO NOTHING RETURNING customer_email
)
SELECT customer_email FROM attempt UNION ALL SELECT customer_email FROM claims WHERE publisher_id = :pub AND claim_key = 'transaction:' || :n;
INSERT INTO transactions (
    publisher_id, app_id, product_ref, transaction_id, original_transaction_id, product_id, customer_email,
    offer_id, environment, job_id, receipt_digest, state, purchase_date, expires_date, cancellation_date,
    received_at, verified_at
) SELECT :pub::uuid, :app::uuid, :prod::uuid, :n, :n, 'com.example.bench.premium', 'c' || :n || '@bench.example',
    'BENCH_PREMIUM', 'Production', 'job-' || :n, md5(:n), 'verified', now(), NULL,
    (SELECT min(cancellation_date) FROM cancellations WHERE app_id = :app AND transaction_id = :n::text), now(), now()
WHERE EXISTS (SELECT 1 FROM claims WHERE publisher_id = :pub AND claim_key = 'transaction:' || :n AND customer_email = 'c' || :n || '@bench.example')
ON CONFLICT (app_id, transaction_id) DO UPDATE SET
    expires_date = EXCLUDED.expires_date,
    cancellation_date = COALESCE(transactions.cancellation_date, EXCLUDED.cancellation_date),
    verified_at = COALESCE(transactions.verified_at, EXCLUDED.verified_at)
RETURNING id AS ledger_id \gset
SELECT expires_at, revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) AS active FROM entitlements
WHERE publisher_id = :pub AND customer_email = 'c' || :n || '@bench.example' AND offer_id = 'BENCH_PREMIUM';
INSERT INTO entitlements (publisher_id, customer_email, offer_id, product_ref, expires_at, granted_by)
VALUES (:pub, 'c' || :n || '@bench.example', 'BENCH_PREMIUM', :prod, NULL, :ledger_id)
ON CONFLICT (publisher_id, customer_email, offer_id) DO UPDATE SET
    expires_at = EXCLUDED.expires_at, product_ref = EXCLUDED.product_ref,
    granted_by = EXCLUDED.granted_by, revoked_at = NULL, updated_at = now();
UPDATE transactions SET state = 'fulfilled', fulfilled_at = now(), granted_until = NULL, last_error = NULL WHERE id = :ledger_id;
END;
