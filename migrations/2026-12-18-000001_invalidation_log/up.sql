-- Every change the proxies must hear of, in the order committed. Redis pub/sub only announces
-- new ids; a proxy that missed announcements (Redis unreachable, a dead subscription) applies
-- the entries after the last id it applied. Pruned by the admin leader past its retention.
CREATE TABLE invalidation_log (
    id         bigserial   PRIMARY KEY,
    message    text        NOT NULL CHECK (length(message) BETWEEN 1 AND 512),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX invalidation_log_created_at ON invalidation_log (created_at);
