-- A prompt template's version never changes once written (docs/prompt-templates.md): the audit
-- log names versions, so what a version said must stay what it said. No code path updates one;
-- this makes the database refuse it too (deletes stay possible: an organization's erasure).
CREATE FUNCTION prompt_template_versions_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'prompt template versions are immutable (template %, version %)', OLD.template_id, OLD.version
        USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER prompt_template_versions_immutable BEFORE UPDATE ON prompt_template_versions
    FOR EACH ROW EXECUTE FUNCTION prompt_template_versions_immutable();
