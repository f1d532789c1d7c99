//! Organization roles, strongest last: what each may do is the admin API's role matrix
//! (`admin/src/authz.rs`, documented in `docs/roles.md`).

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads the organization's configuration; changes nothing.
    Viewer,
    /// Acts on the teams it belongs to.
    Member,
    /// Manages the organization, except its owners.
    Admin,
    Owner,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Member, Role::Admin, Role::Owner];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Admin => "admin",
            Role::Owner => "owner",
        }
    }

    pub fn is_admin(self) -> bool {
        self >= Role::Admin
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role {s:?}; roles: owner, admin, member, viewer"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_names() {
        assert!(Role::Owner > Role::Admin && Role::Admin > Role::Member && Role::Member > Role::Viewer);
        for r in Role::ALL {
            assert_eq!(r.as_str().parse::<Role>(), Ok(r));
        }
        assert!("root".parse::<Role>().is_err());
        assert!("Owner".parse::<Role>().is_err());
    }
}
