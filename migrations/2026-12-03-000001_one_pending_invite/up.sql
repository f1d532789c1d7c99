-- One pending invite per address and organization: a new invite replaces the older one (the API
-- revokes it in the same transaction), and this index makes two concurrent invites for one
-- address conflict instead of both standing. Older duplicates are revoked first, newest kept.
UPDATE invites i
SET revoked_at = now()
WHERE i.accepted_at IS NULL
  AND i.revoked_at IS NULL
  AND EXISTS (
    SELECT 1 FROM invites j
    WHERE j.org_id = i.org_id
      AND j.email_normalized = i.email_normalized
      AND j.accepted_at IS NULL
      AND j.revoked_at IS NULL
      AND (j.created_at, j.id) > (i.created_at, i.id)
  );

CREATE UNIQUE INDEX invites_one_pending ON invites (org_id, email_normalized)
WHERE accepted_at IS NULL AND revoked_at IS NULL;
