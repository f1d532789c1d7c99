-- Purge generations, folded into every L2 (Redis) key of the organization: a purge bumps one and
-- every older entry is unreachable at once, on any Redis topology, whatever it holds. `model_tag`
-- is the hex of a model's tag for a one-model purge, '' for the whole organization's.
CREATE TABLE cache_generations (
    org_id     uuid        NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    model_tag  text        NOT NULL DEFAULT '' CHECK (model_tag = '' OR model_tag ~ '^[0-9a-f]{16}$'),
    generation bigint      NOT NULL CHECK (generation > 0),
    purged_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, model_tag)
);
