"""Facts about the CLR providers that the dissect-etl manifest dumps lack, for tools/gen_manifests.py.

Written by hand from the CLR's own public instrumentation manifest, src/coreclr/vm/ClrEtwAll.man in
dotnet/runtime (MIT), read at commit 68813511f6a4855bd2f2b1605ae19418680ae7de. Only facts are
carried over: map names, values and entry names (the entry names are the manifest's resolved
`$(string.…)` texts), which event's field uses which map, task / opcode values, and the layouts of
event versions newer than the dumps. Task and opcode names follow the dumps' convention (the
resolved message text) where that text was read, else the manifest's own `name=` attribute.

Each provider's entry holds:
  maps          {map name: (kind, [(value, entry name), ...])}, kind "valueMap" or "bitMap";
                replaces the dump's map of the same name (the dumps keep only the maps their
                templates name, and some of those are older, shorter versions).
  field_maps    {event id: {field name: map name}}: the map each event's field uses, for every
                version of the event whose template has that field (the dumps keep a map= only on
                the first template that uses a map and drop it from the others).
  opcodes       {task name in the dump: [(opcode name, value), ...]} added to an existing task.
  tasks         [(task name, value, [(opcode name, value), ...])] added to the provider.
  templates     {tid: [field, ...]}: layouts the dump lacks or flattens (a tid that the dump also
                defines replaces the dump's template). A field is
                (name, inType, {"outType"/"count"/"length"/"map": ...}) or
                ("struct", name, {"count": ...}, [field, ...]).
  events        [(value, version, symbol, level, task, opcode, keywords or None, template)] added
                to the provider (an event the dump already lists is an error).

STRUCT_PADDING below records where the runtime writes a struct array with C alignment padding
that the manifest does not describe; each case is checked against the byte sizes of real records.
"""

RUNTIME_MAPS = {
    "GCSegmentTypeMap": ("valueMap", [
        (0x0, "SmallObjectHeap"), (0x1, "LargeObjectHeap"), (0x2, "ReadOnlyHeap"),
        (0x3, "PinnedHeap"),
    ]),
    "GCAllocationKindMap": ("valueMap", [(0x0, "Small"), (0x1, "Large"), (0x2, "Pinned")]),
    "GCBucketKindMap": ("valueMap", [(0x0, "FLItem"), (0x1, "Plug")]),
    "GCTypeMap": ("valueMap", [
        (0x0, "NonConcurrentGC"), (0x1, "BackgroundGC"), (0x2, "ForegroundGC"),
    ]),
    "GCReasonMap": ("valueMap", [
        (0x0, "AllocSmall"), (0x1, "Induced"), (0x2, "LowMemory"), (0x3, "Empty"),
        (0x4, "AllocLarge"), (0x5, "OutOfSpaceSmallObjectHeap"),
        (0x6, "OutOfSpaceLargeObjectHeap"), (0x7, "InducedNoForce"), (0x8, "Stress"),
        (0x9, "InducedLowMemory"),
    ]),
    "GCSuspendEEReasonMap": ("valueMap", [
        (0x0, "SuspendOther"), (0x1, "SuspendForGC"), (0x2, "SuspendForAppDomainShutdown"),
        (0x3, "SuspendForCodePitching"), (0x4, "SuspendForShutdown"),
        (0x5, "SuspendForDebugger"), (0x6, "SuspendForGCPrep"),
        (0x7, "SuspendForDebuggerSweep"),
    ]),
    "ContentionFlagsMap": ("valueMap", [(0x0, "Managed"), (0x1, "Native")]),
    "TailCallTypeMap": ("valueMap", [
        (0x0, "OptimizedTailCall"), (0x1, "RecursiveLoop"), (0x2, "HelperAssistedTailCall"),
    ]),
    "ThreadAdjustmentReasonMap": ("valueMap", [
        (0x0, "Warmup"), (0x1, "Initializing"), (0x2, "RandomMove"), (0x3, "ClimbingMove"),
        (0x4, "ChangePoint"), (0x5, "Stabilizing"), (0x6, "Starvation"),
        (0x7, "ThreadTimedOut"),
    ]),
    "GCRootKindMap": ("valueMap", [
        (0, "Stack"), (1, "Finalizer"), (2, "Handle"), (3, "Older"), (4, "SizedRef"),
        (5, "Overflow"), (6, "DependentHandle"), (7, "NewFQ"), (8, "Steal"), (9, "BGC"),
    ]),
    "GCHandleKindMap": ("valueMap", [
        (0x0, "WeakShort"), (0x1, "WeakLong"), (0x2, "Strong"), (0x3, "Pinned"),
        (0x4, "Variable"), (0x5, "RefCounted"), (0x6, "Dependent"), (0x7, "AsyncPinned"),
        (0x8, "SizedRef"),
    ]),
    "KnownPathSourceMap": ("valueMap", [
        (0x0, "ApplicationAssemblies"), (0x1, "Unused"), (0x2, "AppPaths"),
        (0x3, "PlatformResourceRoots"), (0x4, "SatelliteSubdirectory"),
    ]),
    "ResolutionAttemptedStageMap": ("valueMap", [
        (0x0, "FindInLoadContext"), (0x1, "AssemblyLoadContextLoad"),
        (0x2, "ApplicationAssemblies"), (0x3, "DefaultAssemblyLoadContextFallback"),
        (0x4, "ResolveSatelliteAssembly"), (0x5, "AssemblyLoadContextResolvingEvent"),
        (0x6, "AppDomainAssemblyResolveEvent"),
    ]),
    "ResolutionAttemptedResultMap": ("valueMap", [
        (0x0, "Success"), (0x1, "AssemblyNotFound"), (0x2, "MismatchedAssemblyName"),
        (0x3, "IncompatibleVersion"), (0x4, "Failure"), (0x5, "Exception"),
    ]),
    "ModuleRangeTypeMap": ("bitMap", [(0x4, "ColdRange")]),
    "AppDomainFlagsMap": ("bitMap", [(0x1, "Default"), (0x2, "Executable"), (0x4, "Shared")]),
    "AssemblyFlagsMap": ("bitMap", [
        (0x1, "DomainNeutral"), (0x2, "Dynamic"), (0x4, "Native"), (0x8, "Collectible"),
    ]),
    "ModuleFlagsMap": ("bitMap", [
        (0x1, "DomainNeutral"), (0x2, "Native"), (0x4, "Dynamic"), (0x8, "Manifest"),
        (0x10, "IbcOptimized"), (0x20, "ReadyToRunModule"), (0x40, "PartialReadyToRunModule"),
    ]),
    "MethodFlagsMap": ("bitMap", [
        (0x1, "Dynamic"), (0x2, "Generic"), (0x4, "HasSharedGenericCode"), (0x8, "Jitted"),
        (0x10, "JitHelper"), (0x20, "ProfilerRejectedPrecompiledCode"),
        (0x40, "ReadyToRunRejectedPrecompiledCode"),
    ]),
    "StartupModeMap": ("bitMap", [
        (0x1, "ManagedExe"), (0x2, "HostedClr"), (0x4, "IjwDll"), (0x8, "ComActivated"),
        (0x10, "Other"),
    ]),
    "RuntimeSkuMap": ("bitMap", [(0x1, "DesktopClr"), (0x2, "CoreClr"), (0x4, "Mono")]),
    "ExceptionThrownFlagsMap": ("bitMap", [
        (0x1, "HasInnerException"), (0x2, "Nested"), (0x4, "ReThrown"),
        (0x8, "CorruptedState"), (0x10, "CLSCompliant"),
    ]),
    "ILStubGeneratedFlagsMap": ("bitMap", [
        (0x1, "ReverseInterop"), (0x2, "ComInterop"), (0x4, "NGenedStub"), (0x8, "Delegate"),
        (0x10, "VarArg"), (0x20, "UnmanagedCallee"), (0x40, "StructMarshal"),
    ]),
    "StartupFlagsMap": ("bitMap", [
        (0x000001, "CONCURRENT_GC"), (0x000002, "LOADER_OPTIMIZATION_SINGLE_DOMAIN"),
        (0x000004, "LOADER_OPTIMIZATION_MULTI_DOMAIN"), (0x000010, "LOADER_SAFEMODE"),
        (0x000100, "LOADER_SETPREFERENCE"), (0x001000, "SERVER_GC"),
        (0x002000, "HOARD_GC_VM"), (0x004000, "SINGLE_VERSION_HOSTING_INTERFACE"),
        (0x010000, "LEGACY_IMPERSONATION"), (0x020000, "DISABLE_COMMITTHREADSTACK"),
        (0x040000, "ALWAYSFLOW_IMPERSONATION"), (0x080000, "TRIM_GC_COMMIT"),
        (0x100000, "ETW"), (0x200000, "SERVER_BUILD"), (0x400000, "ARM"),
    ]),
    "TypeFlagsMap": ("bitMap", [
        (0x1, "Delegate"), (0x2, "Finalizable"), (0x4, "ExternallyImplementedCOMObject"),
        (0x8, "Array"), (0x100, "ArrayRankBit0"), (0x200, "ArrayRankBit1"),
        (0x400, "ArrayRankBit2"), (0x800, "ArrayRankBit3"), (0x1000, "ArrayRankBit4"),
        (0x2000, "ArrayRankBit5"),
    ]),
    "GCRootFlagsMap": ("bitMap", [
        (0x1, "Pinning"), (0x2, "WeakRef"), (0x4, "Interior"), (0x8, "RefCounted"),
    ]),
    "GCRootStaticVarFlagsMap": ("bitMap", [(0x1, "ThreadLocal")]),
    "GCRootCCWFlagsMap": ("bitMap", [(0x1, "Strong"), (0x2, "Pegged")]),
    "ThreadFlagsMap": ("bitMap", [(0x1, "GCSpecial"), (0x2, "Finalizer"), (0x4, "ThreadPoolWorker")]),
    "TieredCompilationSettingsFlagsMap": ("bitMap", [
        (0x0, "None"), (0x1, "QuickJit"), (0x2, "QuickJitForLoops"), (0x4, "TieredPGO"),
        (0x8, "ReadyToRun"),
    ]),
}

# The rundown provider declares its own copies of the maps it uses (same values and names).
RUNDOWN_MAPS = {
    name: RUNTIME_MAPS[name]
    for name in (
        "ModuleRangeTypeMap", "AppDomainFlagsMap", "AssemblyFlagsMap", "ModuleFlagsMap",
        "MethodFlagsMap", "StartupModeMap", "RuntimeSkuMap", "StartupFlagsMap",
        "ThreadFlagsMap", "TieredCompilationSettingsFlagsMap",
    )
}

_METHOD = {"MethodFlags": "MethodFlagsMap"}
_MODULE = {"ModuleFlags": "ModuleFlagsMap"}
_ASSEMBLY = {"AssemblyFlags": "AssemblyFlagsMap"}
_APPDOMAIN = {"AppDomainFlags": "AppDomainFlagsMap"}
_RUNTIME_INFO = {
    "Sku": "RuntimeSkuMap", "StartupFlags": "StartupFlagsMap", "StartupMode": "StartupModeMap",
}

RUNTIME_FIELD_MAPS = {
    1: {"Reason": "GCReasonMap", "Type": "GCTypeMap"},          # GCStart v0-v2
    5: {"Type": "GCSegmentTypeMap"},                             # GCCreateSegment
    9: {"Reason": "GCSuspendEEReasonMap"},                       # GCSuspendEEBegin
    10: {"AllocationKind": "GCAllocationKindMap"},               # GCAllocationTick v0-v4
    30: {"Kind": "GCHandleKindMap"},                             # SetGCHandle
    35: {"Reason": "GCReasonMap"},                               # GCTriggered
    55: {"Reason": "ThreadAdjustmentReasonMap"},                 # ThreadPool adjustment
    80: {"ExceptionFlags": "ExceptionThrownFlagsMap"},           # ExceptionThrown_V1
    81: {"ContentionFlags": "ContentionFlagsMap"},               # ContentionStart
    85: {"Flags": "ThreadFlagsMap"},                             # ThreadCreated
    91: {"ContentionFlags": "ContentionFlagsMap"},               # ContentionStop
    137: _METHOD, 138: _METHOD, 139: _METHOD, 140: _METHOD,      # MethodDC{Start,End}[Verbose]V2
    141: _METHOD, 142: _METHOD, 143: _METHOD, 144: _METHOD,      # MethodLoad/Unload[Verbose]
    149: _MODULE, 150: _MODULE, 151: _MODULE, 152: _MODULE, 153: _MODULE,
    154: _ASSEMBLY, 155: _ASSEMBLY,
    156: _APPDOMAIN, 157: _APPDOMAIN,
    158: {"RangeType": "ModuleRangeTypeMap"},                    # ModuleRangeLoad
    187: _RUNTIME_INFO,                                          # RuntimeInformationStart
    188: {"TailCallType": "TailCallTypeMap"},                    # MethodJitTailCallSucceeded
    202: {"Type": "GCRootKindMap"},                               # GCMarkWithType
    209: {"BucketKind": "GCBucketKindMap"},                       # GCFitBucketInfo
    280: {"Flags": "TieredCompilationSettingsFlagsMap"},         # TieredCompilationSettings
}

RUNDOWN_FIELD_MAPS = {
    141: _METHOD, 142: _METHOD, 143: _METHOD, 144: _METHOD,      # MethodDC{Start,End}[Verbose]
    151: _MODULE, 152: _MODULE, 153: _MODULE, 154: _MODULE,      # [Domain]ModuleDC{Start,End}
    155: _ASSEMBLY, 156: _ASSEMBLY,                              # AssemblyDC{Start,End}
    157: _APPDOMAIN, 158: _APPDOMAIN,                            # AppDomainDC{Start,End}
    159: {"Flags": "ThreadFlagsMap"},                            # ThreadDC
    160: {"RangeType": "ModuleRangeTypeMap"},                    # ModuleRangeDCStart
    161: {"RangeType": "ModuleRangeTypeMap"},                    # ModuleRangeDCEnd
    187: _RUNTIME_INFO,                                          # RuntimeInformationDCStart
    280: {"Flags": "TieredCompilationSettingsFlagsMap"},         # TieredCompilationSettingsDCStart
}

_HEX64 = {"outType": "win:HexInt64"}
_HEX32 = {"outType": "win:HexInt32"}
_U16 = "win:UInt16"
_U32 = "win:UInt32"
_U64 = "win:UInt64"
_PTR = "win:Pointer"

RUNTIME_TEMPLATES = {
    "GCHeapStats_V2": [
        ("GenerationSize0", _U64, _HEX64), ("TotalPromotedSize0", _U64, _HEX64),
        ("GenerationSize1", _U64, _HEX64), ("TotalPromotedSize1", _U64, _HEX64),
        ("GenerationSize2", _U64, _HEX64), ("TotalPromotedSize2", _U64, _HEX64),
        ("GenerationSize3", _U64, _HEX64), ("TotalPromotedSize3", _U64, _HEX64),
        ("FinalizationPromotedSize", _U64, _HEX64), ("FinalizationPromotedCount", _U64, {}),
        ("PinnedObjectCount", _U32, {}), ("SinkBlockCount", _U32, {}),
        ("GCHandleCount", _U32, {}), ("ClrInstanceID", _U16, {}),
        ("GenerationSize4", _U64, _HEX64), ("TotalPromotedSize4", _U64, _HEX64),
    ],
    "GCAllocationTick_V4": [
        ("AllocationAmount", _U32, _HEX32),
        ("AllocationKind", _U32, {"map": "GCAllocationKindMap"}),
        ("ClrInstanceID", _U16, {}), ("AllocationAmount64", _U64, _HEX64),
        ("TypeID", _PTR, {}), ("TypeName", "win:UnicodeString", {}), ("HeapIndex", _U32, {}),
        ("Address", _PTR, {}), ("ObjectSize", _U64, _HEX64),
    ],
    # The dump's GCPerHeapHistoryArgs_V3 flattens Values; this is the manifest's layout.
    "GCPerHeapHistoryArgs_V3": [
        ("ClrInstanceID", _U16, {}),
        ("FreeListAllocated", _PTR, _HEX64), ("FreeListRejected", _PTR, _HEX64),
        ("EndOfSegAllocated", _PTR, _HEX64), ("CondemnedAllocated", _PTR, _HEX64),
        ("PinnedAllocated", _PTR, _HEX64), ("PinnedAllocatedAdvance", _PTR, _HEX64),
        ("RunningFreeListEfficiency", _U32, {}), ("CondemnReasons0", _U32, {}),
        ("CondemnReasons1", _U32, {}), ("CompactMechanisms", _U32, {}),
        ("ExpandMechanisms", _U32, {}), ("HeapIndex", _U32, {}),
        ("ExtraGen0Commit", _PTR, _HEX64), ("Count", _U32, {}),
        ("struct", "Values", {"count": "Count"}, [
            ("SizeBefore", _PTR, _HEX64), ("FreeListBefore", _PTR, _HEX64),
            ("FreeObjBefore", _PTR, _HEX64), ("SizeAfter", _PTR, _HEX64),
            ("FreeListAfter", _PTR, _HEX64), ("FreeObjAfter", _PTR, _HEX64),
            ("In", _PTR, _HEX64), ("PinnedSurv", _PTR, _HEX64),
            ("NonePinnedSurv", _PTR, _HEX64), ("NewAllocation", _PTR, _HEX64),
        ]),
    ],
    "GCGlobalHeap_V4": [
        ("FinalYoungestDesired", _U64, _HEX64), ("NumHeaps", "win:Int32", {}),
        ("CondemnedGeneration", _U32, {}), ("Gen0ReductionCount", _U32, {}),
        ("Reason", _U32, {}), ("GlobalMechanisms", _U32, {}), ("ClrInstanceID", _U16, {}),
        ("PauseMode", _U32, {}), ("MemoryPressure", _U32, {}),
        ("CondemnReasons0", _U32, {}), ("CondemnReasons1", _U32, {}), ("Count", _U32, {}),
        ("struct", "Values", {"count": "Count"}, [("Time", _U32, {})]),
    ],
    "GCLOHCompact": [
        ("ClrInstanceID", _U16, {}), ("Count", _U16, {}),
        ("struct", "Values", {"count": "Count"}, [
            ("TimePlan", _U32, {}), ("TimeCompact", _U32, {}), ("TimeRelocate", _U32, {}),
            ("TotalRefs", _PTR, {}), ("ZeroRefs", _PTR, {}),
        ]),
    ],
    "GCFitBucketInfo": [
        ("ClrInstanceID", _U16, {}), ("BucketKind", _U16, {"map": "GCBucketKindMap"}),
        ("TotalSize", _U64, {}), ("Count", _U16, {}),
        ("struct", "Values", {"count": "Count"}, [
            ("Index", _U16, {}), ("Count", _U32, {}), ("Size", _PTR, _HEX64),
        ]),
    ],
}

RUNTIME_OPCODES = {"GC": [("GCLOHCompact", 208), ("GCFitBucketInfo", 209)]}

RUNTIME_EVENTS = [
    (4, 2, "GCHeapStats_V2", "win:Informational", "GC", "HeapStats", "GCKeyword",
     "GCHeapStats_V2"),
    (10, 4, "GCAllocationTick_V4", "win:Verbose", "GC", "AllocationTick", "GCKeyword",
     "GCAllocationTick_V4"),
    (205, 4, "GCGlobalHeapHistory_V4", "win:Informational", "GC", "GlobalHeapHistory",
     "GCKeyword", "GCGlobalHeap_V4"),
    (208, 0, "GCLOHCompact", "win:Informational", "GC", "GCLOHCompact", "GCKeyword",
     "GCLOHCompact"),
    (209, 0, "GCFitBucketInfo", "win:Verbose", "GC", "GCFitBucketInfo", "GCKeyword",
     "GCFitBucketInfo"),
]

RUNDOWN_TEMPLATES = {
    "GCSettingsRundown": [
        ("HardLimit", _U64, {}), ("LOHThreshold", _U64, {}), ("PhysicalMemoryConfig", _U64, {}),
        ("Gen0MinBudgetConfig", _U64, {}), ("Gen0MaxBudgetConfig", _U64, {}),
        ("HighMemPercentConfig", _U32, {}), ("BitSettings", _U32, {}),
        ("ClrInstanceID", _U16, {}),
    ],
    "TieredCompilationSettings": [
        ("ClrInstanceID", _U16, {}),
        ("Flags", _U32, {"outType": "win:HexInt32", "map": "TieredCompilationSettingsFlagsMap"}),
    ],
}

RUNDOWN_TASKS = [
    ("CLRGCRundown", 40, [("GCSettingsRundown", 10)]),
    ("TieredCompilation", 31, [("SettingsDCStart", 11)]),
]

RUNDOWN_EVENTS = [
    (10, 0, "GCSettingsRundown", "win:Informational", "CLRGCRundown", "GCSettingsRundown", None,
     "GCSettingsRundown"),
    (280, 0, "TieredCompilationSettingsDCStart", "win:Informational", "TieredCompilation",
     "SettingsDCStart", "CompilationKeyword", "TieredCompilationSettings"),
]

# The rundown dump lacks this keyword, which TieredCompilationSettingsDCStart names.
RUNDOWN_KEYWORDS = [("CompilationKeyword", "0x1000000000")]

# (provider, template, struct) -> [(after field, padding field name, inType)]: the runtime copies
# these struct arrays as C structs, so a member is followed by the padding that aligns the next
# one; the manifest lists the members only. Checked against real records
# (perfview_gcevents.etl, 64-bit): GCFitBucketInfo is 14 + Count x 16 bytes (Index u16, 2 bytes
# padding, Count u32, Size pointer), GCLOHCompact is 4 + Count x 32 bytes (three u32, 4 bytes
# padding, two pointers). The padding of a 32-bit process differs only where a pointer follows a
# 4-byte boundary, which the generator cannot express; it is left out there (64-bit layout only).
STRUCT_PADDING = {
    ("Microsoft-Windows-DotNETRuntime", "GCFitBucketInfo", "Values"): [
        ("Index", "Padding", _U16),
    ],
    ("Microsoft-Windows-DotNETRuntime", "GCLOHCompact", "Values"): [
        ("TimeRelocate", "Padding", _U32),
    ],
}

PROVIDERS = {
    "Microsoft-Windows-DotNETRuntime": {
        "maps": RUNTIME_MAPS,
        "field_maps": RUNTIME_FIELD_MAPS,
        "opcodes": RUNTIME_OPCODES,
        "tasks": [],
        "keywords": [],
        "templates": RUNTIME_TEMPLATES,
        "events": RUNTIME_EVENTS,
    },
    "Microsoft-Windows-DotNETRuntimeRundown": {
        "maps": RUNDOWN_MAPS,
        "field_maps": RUNDOWN_FIELD_MAPS,
        "opcodes": {},
        "tasks": RUNDOWN_TASKS,
        "keywords": RUNDOWN_KEYWORDS,
        "templates": RUNDOWN_TEMPLATES,
        "events": RUNDOWN_EVENTS,
    },
}
