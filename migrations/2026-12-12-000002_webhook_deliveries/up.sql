-- One delivery per event and subscribed endpoint (the body is the Standard Webhooks envelope),
-- and every attempt at it. `events.delivered_at` now means "handed to the webhook relay".
CREATE TABLE webhook_deliveries (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    endpoint_id UUID NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id UUID NOT NULL,
    event_type TEXT NOT NULL,
    body JSONB NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts INT NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_org ON webhook_deliveries (org_id, id DESC);

CREATE TABLE webhook_attempts (
    id BIGSERIAL PRIMARY KEY,
    delivery_id UUID NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    org_id UUID NOT NULL,
    attempted_at TIMESTAMPTZ NOT NULL,
    status_code INT,
    latency_ms INT NOT NULL,
    error TEXT,
    response_body TEXT
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, id);

CREATE INDEX events_undelivered ON events (created_at) WHERE delivered_at IS NULL;
