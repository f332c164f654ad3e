//! The writer's EventRecord path: TraceLogging events built with `tlg` reproduce real Windows TL events
//! byte for byte, EVENT_HEADER32/64 records with extended items read back identical, buffers have the
//! documented shape, flush makes data durable, and bad input is refused with a clear error.

mod common;

use std::borrow::Cow;
use std::ops::ControlFlow;

use etwkit::etl::buffer::{buffer_type, flag, BufferHeader, BUFFER_HEADER_SIZE};
use etwkit::etl::writer::{closed_cleanly, WriteError, Writer, WriterOptions};
use etwkit::etl::{EtlFile, Order};
use etwkit::event::{encode_ext_item, ext_type, flags, Stack};
use etwkit::tlg::{self, InType, OutType, TlInstance, TlPayload, TlSchemaBuilder};
use etwkit::{EventDescriptor, EventRecord, Guid, HeaderType};

fn read_all(f: &EtlFile, order: Order) -> Vec<EventRecord<'static>> {
    let mut v = Vec::new();
    let s = f.for_each(order, |r| {
        v.push(r.event.to_owned_record());
        ControlFlow::Continue(())
    });
    assert_eq!(s.bad_records + s.bad_buffers, 0, "{:?}", s.issues);
    v
}

/// The first TraceLogging event of a sample.
fn first_tl_event(name: &str, test: &str) -> Option<EventRecord<'static>> {
    let path = common::sample(name, test)?;
    let f = EtlFile::open(path).unwrap();
    read_all(&f, Order::File)
        .into_iter()
        .find(|e| e.ext_item(ext_type::EVENT_SCHEMA_TL).is_some())
}

#[test]
fn tlg_reproduces_primitive_types_event() {
    let Some(orig) = first_tl_event(
        "perfview_primitive-types.etl",
        "tlg_reproduces_primitive_types_event",
    ) else {
        return;
    };
    // The declared fields of "solar_system" / PrimitiveTypesTest, as its metadata says.
    let schema = TlSchemaBuilder::new("solar_system", "PrimitiveTypesTest")
        .provider_guid(Guid::from_str_const("d3dd3dd4-aac2-4e2a-8dd4-a8fb61b77615"))
        .field("string_type", InType::CStr8, OutType::Default)
        .field("boolean_type", InType::U8, OutType::Boolean)
        .field("char_type", InType::U8, OutType::String)
        .field("int16_type", InType::I16, OutType::Default)
        .field("int32_type", InType::I32, OutType::Default)
        .field("uint16_type", InType::U16, OutType::Default)
        .field("uint32_type", InType::U32, OutType::Default)
        .field("int64_type", InType::U64, OutType::Default)
        .field("uint64_type", InType::U64, OutType::Default)
        .field("guid_type", InType::Guid, OutType::Default)
        .field("file_time_type", InType::FileTime, OutType::Default)
        .field("system_time_type", InType::SystemTime, OutType::Default)
        .build()
        .unwrap();
    assert_eq!(schema.ext(), &orig.ext[..], "extended items byte for byte");
    assert_eq!(orig.traits_provider_name(), Some("solar_system"));
    // The first event's values (Mercury), packed by TL rules, give the recorded payload.
    let mut p = TlPayload::new();
    p.push_cstr("Mercury")
        .push_bool8(false)
        .push_u8(b'M')
        .push_i16(-51)
        .push_i32(-102)
        .push_u16(51)
        .push_u32(102)
        .push_i64(-204)
        .push_u64(204)
        .push_guid(&Guid::from_str_const(
            "0ad614c4-0ef4-4225-8013-f44f37cb0397",
        ))
        .push_filetime(132_756_731_757_990_000)
        .push_systemtime([2021, 9, 4, 9, 14, 59, 35, 799]);
    assert_eq!(p.as_bytes(), &orig.payload[..], "payload byte for byte");
    assert_eq!(schema.descriptor, orig.descriptor);

    // Written by our writer and read back: the same event.
    let inst = TlInstance {
        pid: orig.pid,
        tid: orig.tid,
        cpu: orig.cpu,
        timestamp: orig.timestamp,
        activity_id: orig.activity_id,
    };
    let ev = tlg::event_record(&schema, &inst, p.as_bytes());
    let mut w = Writer::in_memory(WriterOptions::new(orig.timestamp - 10)).unwrap();
    w.write_event(&ev).unwrap();
    let (_, bytes) = w.finish_into_inner().unwrap();
    let back = read_all(&EtlFile::from_vec(bytes).unwrap(), Order::File);
    assert_eq!(back.len(), 2);
    let mut want = orig.clone();
    want.flags &= !flags::PROCESSOR_INDEX;
    // Our clock is FILETIME (raw = UTC); the original's was QPC. TL instances carry no CPU times.
    want.raw_timestamp = want.timestamp;
    (want.kernel_time, want.user_time) = (0, 0);
    let mut got = back[1].clone();
    got.flags &= !flags::PROCESSOR_INDEX;
    assert_eq!(got, want);
}

#[test]
fn tlg_reproduces_eventsource_struct_event() {
    let Some(orig) = first_tl_event(
        "perfview_SelfDescribingSingleEvent.etl",
        "tlg_reproduces_eventsource_struct_event",
    ) else {
        return;
    };
    // MySource "TestEvent": a = struct { b: CStr16, c: CStr16 }; provider GUID derived from the name.
    let schema = TlSchemaBuilder::new("MySource", "TestEvent")
        .id(orig.descriptor.id)
        .level(orig.descriptor.level)
        .keywords(orig.descriptor.keywords)
        .struct_field("a", 2)
        .field("b", InType::CStr16, OutType::Default)
        .field("c", InType::CStr16, OutType::Default)
        .build()
        .unwrap();
    assert_eq!(schema.provider_guid(), orig.provider);
    let items: Vec<_> = orig.ext_items().collect();
    let tl: Vec<_> = items
        .iter()
        .filter(|i| {
            matches!(
                i.ext_type,
                ext_type::PROV_TRAITS | ext_type::EVENT_SCHEMA_TL
            )
        })
        .collect();
    assert_eq!(tl.len(), 2);
    assert_eq!(tl[0].data, schema.traits());
    assert_eq!(tl[1].data, schema.metadata());
    let mut p = TlPayload::new();
    p.push_cstr16("Hello").push_cstr16("World!");
    assert_eq!(p.as_bytes(), &orig.payload[..]);
}

fn sample_options() -> WriterOptions {
    let mut o = WriterOptions::new(133_000_000_000_000_000);
    o.buffer_size = 4096;
    o.logger_name = "writer-test".into();
    o.log_file_name = "/tmp/writer-test.etl".into();
    o.number_of_processors = 2;
    o
}

#[test]
fn event_header_records_with_extended_items_read_back_identical() {
    let schema = TlSchemaBuilder::new("Etwkit-Test", "Tick")
        .level(4)
        .keywords(0x20)
        .field("n", InType::U32, OutType::Default)
        .field("who", InType::CStr8, OutType::Utf8)
        .build()
        .unwrap();
    let t0 = 133_000_000_000_000_000i64;
    let mut written = Vec::new();
    // 600 TL events over 4 CPUs with 4 KiB buffers: many buffers per CPU.
    for i in 0..600u32 {
        let mut p = TlPayload::new();
        p.push_u32(i).push_cstr(&format!("worker-{}", i % 7));
        let inst = TlInstance {
            pid: 100 + i % 3,
            tid: 200 + i,
            cpu: (i % 4) as u16,
            timestamp: t0 + 1000 * i as i64,
            ..Default::default()
        };
        let ev = if i % 50 == 0 {
            // Every 50th with a stack before the TL items.
            let st = Stack {
                match_id: 0,
                addresses: vec![0x7fff_1234_0000 + i as u64, 0x7fff_5678_0000],
            };
            tlg::event_record_with_ext(
                &schema,
                &inst,
                p.into_bytes(),
                Cow::Owned(schema.ext_with_stack(&st)),
            )
            .into_owned()
        } else {
            tlg::event_record(&schema, &inst, p).into_owned()
        };
        written.push(ev);
    }
    // A 32-bit event with a related activity id, a STACK_TRACE32 and a STRING_ONLY payload.
    let mut ext = Vec::new();
    encode_ext_item(
        &mut ext,
        ext_type::RELATED_ACTIVITYID,
        &Guid::from_str_const("11111111-2222-3333-4444-555555555555").to_le_bytes(),
        true,
    );
    let mut st32 = 0u64.to_le_bytes().to_vec();
    st32.extend_from_slice(&0x0040_1000u32.to_le_bytes());
    st32.extend_from_slice(&0x7700_2000u32.to_le_bytes());
    encode_ext_item(&mut ext, ext_type::STACK_TRACE32, &st32, false);
    let msg: Vec<u8> = "hello\0"
        .encode_utf16()
        .flat_map(|u| u.to_le_bytes())
        .collect();
    written.push(EventRecord {
        header_type: HeaderType::EventHeader32,
        flags: flags::EXTENDED_INFO | flags::STRING_ONLY | flags::HEADER_32_BIT,
        provider: Guid::from_str_const("bf6ef1cb-89b5-490a-80ac-b180cfbcff0f"),
        descriptor: EventDescriptor {
            id: 7,
            version: 1,
            channel: 16,
            level: 2,
            opcode: 1,
            task: 9,
            keywords: 0x8000_0000_0000_0001,
        },
        hook_id: None,
        pid: 4242,
        tid: 4243,
        cpu: 1,
        timestamp: t0 + 1_000_000,
        raw_timestamp: t0 + 1_000_000,
        kernel_time: 12,
        user_time: 34,
        activity_id: Guid::from_str_const("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"),
        pointer_size: 4,
        payload: Cow::Owned(msg),
        ext: Cow::Owned(ext),
    });
    let mut w = Writer::in_memory(sample_options()).unwrap();
    for e in &written {
        w.write_event(e).unwrap();
    }
    w.add_events_lost(5);
    let (summary, bytes) = w.finish_into_inner().unwrap();
    assert_eq!(summary.records, 601);
    assert_eq!(summary.time_breaks, 0);
    let f = EtlFile::from_vec(bytes.clone()).unwrap();
    let h = f.header();
    assert!(closed_cleanly(h));
    assert_eq!(h.events_lost, 5);
    assert_eq!(h.logger_name, "writer-test");
    assert_eq!(h.log_file_name, "/tmp/writer-test.etl");
    assert_eq!(h.number_of_processors, 4, "raised to the CPUs written");
    assert_eq!(h.buffer_size, 4096);
    assert_eq!(h.buffers_written as usize, bytes.len() / 4096);
    assert_eq!(h.end_time, t0 + 1_000_000, "the latest record");
    assert_eq!(h.start_time, t0);

    // Records, in time order, equal what was written (the reader synthesizes PROCESSOR_INDEX).
    let mut back = read_all(&f, Order::Time);
    assert_eq!(back[0].hook_id, Some(0), "logfile header first");
    back.remove(0);
    let mut want = written.clone();
    want.sort_by_key(|e| e.timestamp);
    assert_eq!(back.len(), want.len());
    for (b, w) in back.iter_mut().zip(&want) {
        assert_ne!(b.flags & flags::PROCESSOR_INDEX, 0);
        b.flags &= !flags::PROCESSOR_INDEX;
        assert_eq!(b, w);
    }
    assert_eq!(back.iter().filter(|e| e.stack().is_some()).count(), 13);

    // Buffer shape: header buffer, then per-CPU data buffers; valid length = SavedOffset = Offset;
    // 0xFF tail; the buffers written at close carry FLUSH_MARKER.
    let bufs = f.buffers();
    assert_eq!(bufs[0].header.buffer_type, buffer_type::HEADER);
    assert_ne!(bufs[0].header.flags & flag::FLUSH_MARKER, 0);
    let mut per_cpu = [0usize; 4];
    let mut flushed = 0;
    for b in &bufs[1..] {
        let hd = BufferHeader::parse(&bytes[b.file_offset as usize..]).unwrap();
        assert_eq!(hd.buffer_type, buffer_type::GENERIC);
        assert_ne!(hd.flags & flag::PROC_INDEX, 0);
        assert_eq!(hd.saved_offset, hd.offset);
        assert!(hd.offset as usize > BUFFER_HEADER_SIZE);
        let tail =
            &bytes[b.file_offset as usize + hd.offset as usize..b.file_offset as usize + 4096];
        assert!(tail.iter().all(|&x| x == 0xFF));
        per_cpu[hd.cpu() as usize] += 1;
        flushed += (hd.flags & flag::FLUSH_MARKER != 0) as usize;
    }
    assert!(per_cpu.iter().all(|&n| n >= 3), "{per_cpu:?}");
    assert_eq!(flushed, 4, "one partly filled buffer per CPU at close");
}

#[test]
fn flush_makes_records_durable_and_drop_is_not_a_clean_close() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("writer_events");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("flush.etl");
    let schema = TlSchemaBuilder::new("Etwkit-Test", "Step")
        .field("n", InType::U64, OutType::Default)
        .build()
        .unwrap();
    let t0 = 133_000_000_000_000_000i64;
    let mut w = Writer::create(&path, sample_options()).unwrap();
    // Right after create: a readable file, header only, not closed.
    let f = EtlFile::open(&path).unwrap();
    assert!(!closed_cleanly(f.header()));
    assert!(!f.header().closed_cleanly());
    assert_eq!(f.buffers().len(), 1);
    for n in 0..10u64 {
        let mut p = TlPayload::new();
        p.push_u64(n);
        w.write_event(&tlg::event_record(
            &schema,
            &TlInstance {
                cpu: 1,
                timestamp: t0 + n as i64,
                ..Default::default()
            },
            p,
        ))
        .unwrap();
    }
    // Not yet on disk (the CPU buffer is not full); flush writes it.
    assert_eq!(
        read_all(&EtlFile::open(&path).unwrap(), Order::File).len(),
        1
    );
    w.flush().unwrap();
    let got = read_all(&EtlFile::open(&path).unwrap(), Order::File);
    assert_eq!(got.len(), 11);
    assert_eq!(&got[10].payload[..], &9u64.to_le_bytes());
    // More records, then drop without finish: written, but the header says not closed cleanly.
    for n in 10..15u64 {
        let mut p = TlPayload::new();
        p.push_u64(n);
        w.write_event(&tlg::event_record(
            &schema,
            &TlInstance {
                cpu: 0,
                timestamp: t0 + n as i64,
                ..Default::default()
            },
            p,
        ))
        .unwrap();
    }
    drop(w);
    let f = EtlFile::open(&path).unwrap();
    assert_eq!(read_all(&f, Order::File).len(), 16);
    assert!(!closed_cleanly(f.header()));
    assert_eq!(f.header().end_time, 0);
}

#[test]
fn records_going_back_in_time_start_a_new_buffer() {
    let schema = TlSchemaBuilder::new("P", "E")
        .field("n", InType::U8, OutType::Default)
        .build()
        .unwrap();
    let mut w = Writer::in_memory(sample_options()).unwrap();
    for (i, t) in [30i64, 10, 20].iter().enumerate() {
        let ev = tlg::event_record(
            &schema,
            &TlInstance {
                cpu: 0,
                timestamp: 133_000_000_000_000_000 + t,
                ..Default::default()
            },
            vec![i as u8],
        );
        w.write_event(&ev).unwrap();
    }
    let (s, bytes) = w.finish_into_inner().unwrap();
    assert_eq!(s.time_breaks, 1);
    let f = EtlFile::from_vec(bytes).unwrap();
    assert_eq!(f.buffers().len(), 3);
    let order: Vec<u8> = read_all(&f, Order::Time)
        .iter()
        .skip(1)
        .map(|e| e.payload[0])
        .collect();
    assert_eq!(order, [1, 2, 0]);
}

#[test]
fn bad_input_is_refused_with_a_clear_error() {
    let schema = TlSchemaBuilder::new("P", "E")
        .field("b", InType::Binary, OutType::Default)
        .build()
        .unwrap();
    let inst = TlInstance {
        timestamp: 133_000_000_000_000_000,
        ..Default::default()
    };
    let mut w = Writer::in_memory(sample_options()).unwrap();

    let mut ev = tlg::event_record(&schema, &inst, vec![0u8; 70_000]);
    assert!(matches!(w.write_event(&ev), Err(WriteError::EventTooLarge { size }) if size > 70_000));
    ev.payload = Cow::Owned(vec![0u8; 5000]);
    let e = w.write_event(&ev).unwrap_err();
    assert!(
        matches!(
            e,
            WriteError::RecordTooLarge {
                buffer_size: 4096,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("4096-byte buffer"));
    ev.payload = Cow::Owned(vec![0u8; 8]);
    ev.cpu = 5000;
    assert!(matches!(
        w.write_event(&ev),
        Err(WriteError::CpuOutOfRange(5000))
    ));
    ev.cpu = 0;
    ev.ext = Cow::Owned(schema.ext()[..20].to_vec());
    assert!(matches!(
        w.write_event(&ev),
        Err(WriteError::BadExtendedData { len: 20 })
    ));
    ev.ext = Cow::Borrowed(schema.ext());
    ev.header_type = HeaderType::System64;
    assert!(matches!(
        w.write_event(&ev),
        Err(WriteError::NotEventHeader(HeaderType::System64))
    ));
    let clock = *w.clock();
    assert!(matches!(
        w.write_raw(&[0xFF; 16], 0, &clock),
        Err(WriteError::BadRecord(_))
    ));
    assert!(matches!(
        w.write_raw(&[1, 2, 3, 4, 5, 6, 7, 8], 0, &clock),
        Err(WriteError::BadRecord(_))
    ));
    // A raw record whose size field disagrees with the bytes given.
    let mut raw = vec![0u8; 0x50];
    raw[0..2].copy_from_slice(&0x60u16.to_le_bytes());
    raw[2] = 0x13;
    raw[3] = 0xC0;
    let e = w.write_raw(&raw, 0, &clock).unwrap_err();
    assert!(
        e.to_string().contains("only 80 remain") || e.to_string().contains("96"),
        "{e}"
    );
    // Nothing of the refused records was written.
    let (s, _) = w.finish_into_inner().unwrap();
    assert_eq!(s.records, 0);

    let mut o = sample_options();
    o.buffer_size = 1000;
    assert!(matches!(Writer::in_memory(o), Err(WriteError::Options(_))));
    let mut o = sample_options();
    o.pointer_size = 2;
    assert!(matches!(Writer::in_memory(o), Err(WriteError::Options(_))));
}

#[test]
fn thirty_two_bit_logger_header() {
    let mut o = sample_options();
    o.pointer_size = 4;
    let (_, bytes) = Writer::in_memory(o).unwrap().finish_into_inner().unwrap();
    let f = EtlFile::from_vec(bytes).unwrap();
    assert_eq!(f.header().layout_pointer_size, 4);
    assert_eq!(f.header().pointer_size, 4);
    assert_eq!(f.header().logger_name, "writer-test");
    let recs = read_all(&f, Order::File);
    assert_eq!(recs[0].header_type, HeaderType::System32);
    assert!(closed_cleanly(f.header()));
}

#[test]
fn flush_interval_writes_partial_buffers_on_its_own() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("writer_events");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("timer.etl");
    let schema = TlSchemaBuilder::new("Etwkit-Test", "Step")
        .field("n", InType::U64, OutType::Default)
        .build()
        .unwrap();
    let mut o = sample_options();
    o.flush_interval = Some(std::time::Duration::from_millis(300));
    let mut w = Writer::create(&path, o).unwrap();
    let ev = |n: u64| {
        let mut p = TlPayload::new();
        p.push_u64(n);
        tlg::event_record(
            &schema,
            &TlInstance {
                cpu: 0,
                timestamp: 133_000_000_000_000_000 + n as i64,
                ..Default::default()
            },
            p,
        )
        .into_owned()
    };
    w.write_event(&ev(0)).unwrap();
    assert_eq!(
        read_all(&EtlFile::open(&path).unwrap(), Order::File).len(),
        1,
        "not due yet"
    );
    std::thread::sleep(std::time::Duration::from_millis(350));
    // Idle: the timer check alone writes the pending event.
    w.flush_if_due().unwrap();
    assert_eq!(
        read_all(&EtlFile::open(&path).unwrap(), Order::File).len(),
        2
    );
    w.write_event(&ev(1)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(350));
    // The next write is due: it and the one before reach the disk.
    w.write_event(&ev(2)).unwrap();
    assert_eq!(
        read_all(&EtlFile::open(&path).unwrap(), Order::File).len(),
        4
    );
    w.finish().unwrap();
}
