-- An organization's account with the billing provider (Stripe): its customer, its subscription
-- as the newest applied event says, and that event's time (`state_at`: an older event never
-- overwrites a newer state).
CREATE TABLE billing_accounts (
    org_id UUID PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    customer_id TEXT UNIQUE,
    subscription_id TEXT,
    subscription_status TEXT,
    price_id TEXT,
    current_period_end TIMESTAMPTZ,
    cancel_at_period_end BOOLEAN NOT NULL DEFAULT FALSE,
    past_due_since TIMESTAMPTZ,
    state_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Every provider event received, once (its id is the provider's): what makes the webhook
-- idempotent, and what became of each.
CREATE TABLE billing_events (
    id TEXT PRIMARY KEY,
    event_type TEXT NOT NULL,
    org_id UUID,
    created_at TIMESTAMPTZ NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    outcome TEXT NOT NULL DEFAULT 'received'
);
CREATE INDEX billing_events_org ON billing_events (org_id, received_at DESC);
