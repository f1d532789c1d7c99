-- A team's own mandatory policies: applied to every request of its keys after the
-- organization's, and, unlike its defaults, not switched off by `x-gw-policy: -name`.
ALTER TABLE teams ADD COLUMN mandatory_policies TEXT[] NOT NULL DEFAULT '{}';
