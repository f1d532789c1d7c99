//! Diesel table definitions, kept by hand in step with `migrations/`.

diesel::table! {
    organizations (id) {
        id -> Uuid,
        name -> Text,
        plan -> Text,
        data_residency_region -> Text,
        metadata -> Jsonb,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        budget -> Nullable<Jsonb>,
        rate_limits -> Nullable<Jsonb>,
        log_bodies -> Bool,
        require_totp -> Bool,
        gateway_quota -> Nullable<Jsonb>,
    }
}

diesel::table! {
    users (id) {
        id -> Uuid,
        email -> Text,
        name -> Text,
        password_hash -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        email_normalized -> Text,
        kind -> Text,
        totp_secret_sealed -> Nullable<Bytea>,
        totp_key_version -> Nullable<Int2>,
        totp_enabled_at -> Nullable<Timestamptz>,
        totp_last_step -> Nullable<Int8>,
    }
}

diesel::table! {
    org_memberships (org_id, user_id) {
        org_id -> Uuid,
        user_id -> Uuid,
        role -> Text,
        created_at -> Timestamptz,
        alert_emails -> Array<Text>,
    }
}

diesel::table! {
    teams (id) {
        id -> Uuid,
        org_id -> Uuid,
        name -> Text,
        metadata -> Jsonb,
        created_at -> Timestamptz,
        deleted_at -> Nullable<Timestamptz>,
        allowed_models -> Nullable<Array<Text>>,
        description -> Text,
        default_policies -> Array<Text>,
        budget -> Nullable<Jsonb>,
        rate_limits -> Nullable<Jsonb>,
        updated_at -> Timestamptz,
        mandatory_policies -> Array<Text>,
    }
}

diesel::table! {
    team_members (team_id, user_id) {
        org_id -> Uuid,
        team_id -> Uuid,
        user_id -> Uuid,
        role -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    api_keys (id) {
        id -> Uuid,
        org_id -> Uuid,
        team_id -> Nullable<Uuid>,
        name -> Text,
        key_prefix -> Text,
        key_hash -> Bytea,
        permissions -> Array<Text>,
        created_by -> Nullable<Uuid>,
        created_at -> Timestamptz,
        last_used_at -> Nullable<Timestamptz>,
        expires_at -> Nullable<Timestamptz>,
        revoked_at -> Nullable<Timestamptz>,
        allowed_models -> Nullable<Array<Text>>,
        updated_at -> Timestamptz,
        budget -> Nullable<Jsonb>,
        rate_limits -> Nullable<Jsonb>,
        previous_key_hash -> Nullable<Bytea>,
        previous_key_expires_at -> Nullable<Timestamptz>,
        expiry_announced_at -> Nullable<Timestamptz>,
        kind -> Text,
    }
}

diesel::table! {
    refresh_tokens (id) {
        id -> Uuid,
        user_id -> Uuid,
        org_id -> Uuid,
        family_id -> Uuid,
        token_hash -> Bytea,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        used_at -> Nullable<Timestamptz>,
        revoked_at -> Nullable<Timestamptz>,
        successor_sealed -> Nullable<Bytea>,
    }
}

diesel::table! {
    provider_keys (id) {
        id -> Uuid,
        org_id -> Uuid,
        provider -> Text,
        name -> Text,
        secret_ciphertext -> Bytea,
        secret_hint -> Text,
        created_by -> Nullable<Uuid>,
        created_at -> Timestamptz,
        rotated_at -> Nullable<Timestamptz>,
        revoked_at -> Nullable<Timestamptz>,
        key_version -> SmallInt,
        updated_at -> Timestamptz,
        version -> Int4,
        previous_ciphertext -> Nullable<Bytea>,
        previous_key_version -> Nullable<SmallInt>,
        previous_expires_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    audit_logs (id, created_at) {
        id -> Uuid,
        org_id -> Uuid,
        team_id -> Nullable<Uuid>,
        api_key_id -> Nullable<Uuid>,
        endpoint -> Text,
        model -> Nullable<Text>,
        provider -> Nullable<Text>,
        upstream_model -> Nullable<Text>,
        status_code -> Int4,
        error_type -> Nullable<Text>,
        stream -> Bool,
        prompt_tokens -> Int4,
        completion_tokens -> Int4,
        total_tokens -> Int4,
        cost_usd -> Numeric,
        latency_ms -> Int4,
        upstream_latency_ms -> Nullable<Int4>,
        ttft_ms -> Nullable<Int4>,
        cache_status -> Text,
        policy_action -> Nullable<Text>,
        attempts -> Int4,
        created_at -> Timestamptz,
        cached_tokens -> Int4,
        reasoning_tokens -> Int4,
        routing -> Jsonb,
        policy -> Jsonb,
        cache_creation_tokens -> Int4,
        cache_saved_usd -> Numeric,
        cache_similarity -> Nullable<Float4>,
        deployment -> Nullable<Text>,
        overhead_us -> Nullable<Int4>,
        client_ip -> Nullable<Inet>,
        user_agent_id -> Nullable<Int8>,
        request_body -> Nullable<Text>,
        response_body -> Nullable<Text>,
        chain_seq -> Nullable<Int8>,
        prev_hash -> Nullable<Bytea>,
        row_hash -> Nullable<Bytea>,
        ingested_at -> Timestamptz,
        settled_by -> Nullable<Text>,
        template_id -> Nullable<Uuid>,
        template_version -> Nullable<Int4>,
        experiment_id -> Nullable<Uuid>,
        experiment_variant -> Nullable<Text>,
        origin -> Nullable<Text>,
    }
}

diesel::table! {
    audit_chain_heads (org_id) {
        org_id -> Uuid,
        seq -> Int8,
        hash -> Bytea,
    }
}

diesel::table! {
    audit_rollups_hourly (org_id, hour) {
        org_id -> Uuid,
        hour -> Timestamptz,
        team_id -> Nullable<Uuid>,
        model -> Nullable<Text>,
        provider -> Nullable<Text>,
        requests -> Int8,
        errors -> Int8,
        prompt_tokens -> Int8,
        completion_tokens -> Int8,
        cached_tokens -> Int8,
        cost_usd -> Numeric,
        cache_saved_usd -> Numeric,
        cache_hits -> Int8,
        cache_lookups -> Int8,
        latency_hist -> Array<Int8>,
        api_key_id -> Nullable<Uuid>,
        gateway_cost_usd -> Numeric,
    }
}

diesel::table! {
    audit_user_agents (id) {
        id -> Int8,
        value -> Text,
    }
}

diesel::table! {
    reconcile_runs (id) {
        id -> Uuid,
        org_id -> Uuid,
        provider -> Text,
        start_day -> Date,
        end_day -> Date,
        created_by -> Nullable<Uuid>,
        created_at -> Timestamptz,
        logged -> Jsonb,
        reported -> Jsonb,
        discrepancies -> Jsonb,
    }
}

diesel::table! {
    invites (id) {
        id -> Uuid,
        org_id -> Uuid,
        email -> Text,
        email_normalized -> Text,
        role -> Text,
        team_ids -> Array<Uuid>,
        token_hash -> Bytea,
        invited_by -> Nullable<Uuid>,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        accepted_at -> Nullable<Timestamptz>,
        accepted_by -> Nullable<Uuid>,
        revoked_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    sessions (id) {
        id -> Uuid,
        user_id -> Uuid,
        org_id -> Uuid,
        method -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        revoked_at -> Nullable<Timestamptz>,
        scope -> Text,
    }
}

diesel::table! {
    admin_audit_events (id) {
        id -> Uuid,
        org_id -> Uuid,
        actor_user_id -> Nullable<Uuid>,
        actor_role -> Nullable<Text>,
        action -> Text,
        resource_type -> Text,
        resource_id -> Nullable<Text>,
        request_id -> Nullable<Text>,
        detail -> Jsonb,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    sso_connections (id) {
        id -> Uuid,
        org_id -> Uuid,
        name -> Text,
        issuer -> Text,
        client_id -> Text,
        client_secret_sealed -> Bytea,
        key_version -> SmallInt,
        email_domains -> Array<Text>,
        groups_claim -> Text,
        role_mapping -> Jsonb,
        team_mapping -> Jsonb,
        default_role -> Text,
        enabled -> Bool,
        created_by -> Nullable<Uuid>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    sso_domains (connection_id, domain) {
        domain -> Text,
        connection_id -> Uuid,
        org_id -> Uuid,
        verification_token -> Text,
        verified_at -> Nullable<Timestamptz>,
        checked_at -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    sso_identities (id) {
        id -> Uuid,
        org_id -> Uuid,
        connection_id -> Uuid,
        issuer -> Text,
        subject -> Text,
        user_id -> Uuid,
        linked_by -> Text,
        created_at -> Timestamptz,
        last_sign_in_at -> Timestamptz,
    }
}

diesel::table! {
    recovery_codes (id) {
        id -> Uuid,
        user_id -> Uuid,
        code_hash -> Bytea,
        created_at -> Timestamptz,
        used_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    password_resets (id) {
        id -> Uuid,
        user_id -> Uuid,
        token_hash -> Bytea,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        used_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    service_accounts (id) {
        id -> Uuid,
        org_id -> Uuid,
        name -> Text,
        role -> Text,
        scopes -> Array<Text>,
        token_prefix -> Text,
        token_hash -> Bytea,
        created_by -> Nullable<Uuid>,
        created_at -> Timestamptz,
        expires_at -> Nullable<Timestamptz>,
        last_used_at -> Nullable<Timestamptz>,
        revoked_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    pending_registrations (id) {
        id -> Uuid,
        email -> Text,
        email_normalized -> Text,
        name -> Text,
        org_name -> Text,
        password_hash -> Text,
        token_hash -> Bytea,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        completed_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    email_outbox (id) {
        id -> Uuid,
        to_address -> Text,
        kind -> Text,
        subject -> Text,
        body -> Text,
        created_at -> Timestamptz,
        sent_at -> Nullable<Timestamptz>,
        attempts -> Int4,
        next_attempt_at -> Timestamptz,
        last_error -> Nullable<Text>,
        failed_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    events (id) {
        id -> Uuid,
        org_id -> Uuid,
        event_type -> Text,
        dedupe_key -> Text,
        payload -> Jsonb,
        created_at -> Timestamptz,
        delivered_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    policy_versions (id) {
        id -> Int8,
        org_id -> Uuid,
        team_id -> Nullable<Uuid>,
        version -> Int4,
        document -> Jsonb,
        source -> Text,
        actor_id -> Nullable<Uuid>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    billing_accounts (org_id) {
        org_id -> Uuid,
        customer_id -> Nullable<Text>,
        subscription_id -> Nullable<Text>,
        subscription_status -> Nullable<Text>,
        price_id -> Nullable<Text>,
        current_period_end -> Nullable<Timestamptz>,
        cancel_at_period_end -> Bool,
        past_due_since -> Nullable<Timestamptz>,
        state_at -> Nullable<Timestamptz>,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    billing_events (id) {
        id -> Text,
        event_type -> Text,
        org_id -> Nullable<Uuid>,
        created_at -> Timestamptz,
        received_at -> Timestamptz,
        outcome -> Text,
    }
}

diesel::joinable!(team_members -> users (user_id));
diesel::joinable!(org_memberships -> users (user_id));

diesel::allow_tables_to_appear_in_same_query!(
    billing_accounts,
    billing_events,
    pending_registrations,
    email_outbox,
    invites,
    sessions,
    admin_audit_events,
    sso_connections,
    sso_domains,
    sso_identities,
    recovery_codes,
    password_resets,
    service_accounts,
    organizations,
    users,
    org_memberships,
    teams,
    team_members,
    api_keys,
    refresh_tokens,
    provider_keys,
    audit_logs,
    events,
    policy_versions,
    cache_settings,
    audit_chain_heads,
    audit_user_agents,
    reconcile_runs,
);

diesel::table! {
    cache_settings (org_id) {
        org_id -> Uuid,
        team_id -> Nullable<Uuid>,
        settings -> Jsonb,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    route_catalog_versions (version) {
        version -> Int8,
        routes -> Jsonb,
        change -> Text,
        actor_user_id -> Nullable<Uuid>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    gateway_operators (user_id) {
        user_id -> Uuid,
        granted_at -> Timestamptz,
    }
}

diesel::table! {
    org_routes (org_id, version) {
        org_id -> Uuid,
        version -> Int4,
        routes -> Jsonb,
        actor_user_id -> Nullable<Uuid>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    webhook_endpoints (id) {
        id -> Uuid,
        org_id -> Uuid,
        url -> Text,
        description -> Text,
        event_types -> Array<Text>,
        enabled -> Bool,
        secret_ciphertext -> Bytea,
        key_version -> SmallInt,
        previous_ciphertext -> Nullable<Bytea>,
        previous_key_version -> Nullable<SmallInt>,
        previous_expires_at -> Nullable<Timestamptz>,
        created_by -> Nullable<Uuid>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    webhook_deliveries (id) {
        id -> Uuid,
        org_id -> Uuid,
        endpoint_id -> Uuid,
        event_id -> Uuid,
        event_type -> Text,
        body -> Jsonb,
        status -> Text,
        attempts -> Int4,
        next_attempt_at -> Timestamptz,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        claimed_until -> Nullable<Timestamptz>,
        auto_attempts -> Int4,
        coalesce_key -> Nullable<Text>,
    }
}

diesel::table! {
    webhook_attempts (id) {
        id -> Int8,
        delivery_id -> Uuid,
        org_id -> Uuid,
        attempted_at -> Timestamptz,
        status_code -> Nullable<Int4>,
        latency_ms -> Int4,
        error -> Nullable<Text>,
        response_body -> Nullable<Text>,
        manual -> Bool,
    }
}
