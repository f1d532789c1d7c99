DROP TABLE prompt_template_labels;
DROP TABLE prompt_template_versions;
DROP TABLE prompt_templates;
