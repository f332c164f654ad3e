//! Kernel (NT Kernel Logger) groups: HookId = `Group << 8 | Type`; the group selects the class GUID
//! under which `etwkit stats` counts a record (facts from kernel-mof.json `groupGuidMap`).

use crate::guid::Guid;

const GROUPS: [(&str, &str); 31] = [
    ("68fdd900-4a3e-11d1-84f4-0000f80464e3", "EventTrace"),
    ("3d6fa8d4-fe05-11d0-9dda-00c04fd7ba7c", "DiskIo"),
    ("3d6fa8d3-fe05-11d0-9dda-00c04fd7ba7c", "PageFault"),
    ("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c", "Process"),
    ("90cbdc39-4a3e-11d1-84f4-0000f80464e3", "FileIo"),
    ("3d6fa8d1-fe05-11d0-9dda-00c04fd7ba7c", "Thread"),
    ("9a280ac0-c8e0-11d1-84e2-00c04fb998a2", "TcpIp"),
    ("3282fc76-feed-498e-8aa7-e70f459d430e", "Job"),
    ("bf3a50c5-a9c9-4988-a005-2df0b7c80f80", "UdpIp"),
    ("ae53722e-c863-11d2-8659-00c04fa321a1", "Registry"),
    ("13976d09-a327-438c-950b-7f03192815c7", "DbgPrint"),
    ("01853a65-418f-4f36-aefc-dc0f1d2fd235", "EventTraceConfig"),
    ("99134383-5248-43fc-834b-529454e75df3", "Spare1"),
    ("42695762-ea50-497a-9068-5cbbb35e0b95", "Wnf"),
    ("0268a8b6-74fd-4302-9dd0-6e8f1795c0cf", "Pool"),
    ("ce1dbfb4-137e-4da6-87b0-3f59aa102cbc", "PerfInfo"),
    ("222962ab-6180-4b88-a825-346b75f2a24a", "Heap"),
    ("89497f50-effe-4440-8cf2-ce6b1cdcaca7", "Object"),
    ("e43445e0-0903-48c3-b878-ff0fccebdd04", "Power"),
    ("a9152f00-3f58-4bee-92a1-70c7d079d5dd", "ModBound"),
    ("2cb15d1d-5fc1-11d2-abe1-00a0c911f518", "Image"),
    ("b2d14872-7c5b-463d-8419-ee9bf7d23e04", "Dpc"),
    ("7687a439-f752-45b8-b741-321aec0f8df9", "Cc"),
    ("3ac66736-cc59-4cff-8115-8df50e39816b", "CritSec"),
    ("def2fe46-7bd6-4b80-bd94-f57fe20d0ce3", "StackWalk"),
    ("9aec974b-5b8e-4118-9b92-3186d8002ce5", "Ums"),
    ("45d8cccd-539f-4b72-a8b7-5c683142609a", "ALPC"),
    ("d837ca92-12b9-44a5-ad6a-3a65b3578aa8", "SplitIo"),
    ("c861d0e2-a2c1-4d36-9f9c-970bab943a12", "ThreadPool"),
    ("7f2a405c-69b5-4bf9-a1f5-30e8f1afab5e", "Hypervisor"),
    ("2ce9a149-effe-42f0-a635-a1d39e26c8f2", "HypervisorX"),
];

static GROUP_GUIDS: [Guid; 31] = {
    let mut out = [Guid::ZERO; 31];
    let mut i = 0;
    while i < 31 {
        out[i] = Guid::from_str_const(GROUPS[i].0);
        i += 1;
    }
    out
};

/// The class GUID of a kernel hook: its group's GUID, except HookId 0x030A (process image load),
/// which belongs to Image. Groups ≥ 0x1F have none (zero GUID).
pub fn group_guid(hook_id: u16) -> Guid {
    if hook_id == 0x030A {
        return GROUP_GUIDS[0x14];
    }
    GROUP_GUIDS
        .get((hook_id >> 8) as usize)
        .copied()
        .unwrap_or(Guid::ZERO)
}

/// The name of a kernel group (`"Process"`, `"StackWalk"`...).
pub fn group_name(group: u8) -> Option<&'static str> {
    GROUPS.get(group as usize).map(|g| g.1)
}

/// The group whose class GUID this is.
pub fn group_of_guid(g: &Guid) -> Option<u8> {
    GROUP_GUIDS.iter().position(|x| x == g).map(|i| i as u8)
}
