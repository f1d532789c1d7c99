-- Prompt templates (docs/prompt-templates.md): a template names its versions; every edit is a
-- new immutable version (numbered from 1 by the template's counter, so concurrent edits each get
-- their own); labels point at versions. Deleting a template is soft: its versions stay for the
-- audit log's references.
CREATE TABLE prompt_templates (
    id UUID PRIMARY KEY,
    org_id UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name TEXT NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    description TEXT NOT NULL DEFAULT '',
    latest_version INTEGER NOT NULL DEFAULT 0,
    created_by UUID,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    deleted_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX prompt_templates_org_name ON prompt_templates (org_id, name) WHERE deleted_at IS NULL;
CREATE INDEX prompt_templates_org ON prompt_templates (org_id, id DESC);

CREATE TABLE prompt_template_versions (
    template_id UUID NOT NULL REFERENCES prompt_templates (id) ON DELETE CASCADE,
    org_id UUID NOT NULL,
    version INTEGER NOT NULL CHECK (version >= 1),
    messages JSONB NOT NULL,
    variables JSONB NOT NULL,
    -- The author's note on the change, and the SHA-256 of the content (canonical JSON).
    message TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL,
    author_id UUID,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (template_id, version)
);

CREATE TABLE prompt_template_labels (
    template_id UUID NOT NULL REFERENCES prompt_templates (id) ON DELETE CASCADE,
    label TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_by UUID,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (template_id, label),
    FOREIGN KEY (template_id, version) REFERENCES prompt_template_versions (template_id, version)
);
