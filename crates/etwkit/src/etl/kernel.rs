//! Kernel (NT Kernel Logger) groups: HookId = `Group << 8 | Type`; the group selects the class GUID
//! under which a record is attributed. The table itself is the generated one in
//! [`crate::schema::builtin::kernel_mof::GROUPS`] (from kernel-mof.json `groupGuidMap`).

use crate::guid::Guid;
use crate::schema::builtin::{kernel_group_guid, kernel_mof::GROUPS};

/// The class GUID of a kernel hook: its group's GUID, except HookId 0x030A (process image load),
/// which belongs to Image. Groups ≥ 0x1F have none (zero GUID).
#[inline]
pub fn group_guid(hook_id: u16) -> Guid {
    let group = if hook_id == 0x030A {
        0x14
    } else {
        (hook_id >> 8) as usize
    };
    match GROUPS.get(group) {
        // The table is ordered by group number: index directly on the record-walk hot path.
        Some((g, guid, _)) if *g as usize == group => *guid,
        _ => kernel_group_guid(group as u8).unwrap_or(Guid::ZERO),
    }
}
