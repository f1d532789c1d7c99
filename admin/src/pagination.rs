//! Pagination, the same on every list: `limit` (1 to 200, default 50) and `cursor` (the
//! `next_cursor` of the previous page). Pages are newest first by id (UUIDv7, so time-ordered);
//! `next_cursor` is null on the last page.

use serde::Serialize;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 200;

/// A checked `limit`.
pub fn limit(requested: Option<i64>) -> ApiResult<i64> {
    let limit = requested.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::field("limit", format!("must be between 1 and {MAX_LIMIT}")));
    }
    Ok(limit)
}

/// The query of a list that takes nothing but the page: `limit` and `cursor`.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// 1 to 200; default 50.
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}

/// One page of a list.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub data: Vec<T>,
    /// Pass as `cursor` to get the next page; null on the last page.
    pub next_cursor: Option<Uuid>,
}

impl<T> Page<T> {
    /// From up to `limit + 1` rows fetched (the extra one only tells that another page exists),
    /// `id` giving each row's cursor.
    pub fn from_rows<R>(mut rows: Vec<R>, limit: i64, id: impl Fn(&R) -> Uuid, out: impl FnMut(R) -> T) -> Self {
        let more = rows.len() as i64 > limit;
        rows.truncate(limit.max(0) as usize);
        let next_cursor = if more { rows.last().map(&id) } else { None };
        Page { data: rows.into_iter().map(out).collect(), next_cursor }
    }
}

/// One page of a list ordered by something other than an id (a version number, a catalog's
/// order): the cursor is opaque text.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CursorPage<T> {
    pub data: Vec<T>,
    /// Pass as `cursor` to get the next page; null on the last page.
    pub next_cursor: Option<String>,
}

impl<T> CursorPage<T> {
    /// As [`Page::from_rows`], with `cursor` giving each row's cursor text.
    pub fn from_rows<R>(mut rows: Vec<R>, limit: i64, cursor: impl Fn(&R) -> String, out: impl FnMut(R) -> T) -> Self {
        let more = rows.len() as i64 > limit;
        rows.truncate(limit.max(0) as usize);
        let next_cursor = if more { rows.last().map(&cursor) } else { None };
        CursorPage { data: rows.into_iter().map(out).collect(), next_cursor }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_cursors() {
        assert_eq!(limit(None).ok(), Some(DEFAULT_LIMIT));
        assert!(limit(Some(0)).is_err() && limit(Some(MAX_LIMIT + 1)).is_err());
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        let p = Page::from_rows(ids.clone(), 2, |u| *u, |u| u);
        assert_eq!(p.data.len(), 2);
        assert_eq!(p.next_cursor, Some(ids[1]));
        let p = Page::from_rows(ids[..2].to_vec(), 2, |u| *u, |u| u);
        assert_eq!(p.next_cursor, None);
    }
}
