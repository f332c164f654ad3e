//! Kernel StackWalk events attached to the events they were taken for (perfview_net.4.5.2.x64.etl,
//! recorded by PerfView with /StackCompression: most stacks are StackKey references to KeyCreate /
//! KeyRundown definitions).

mod common;

use std::ops::ControlFlow;

use etwkit::decode::stacks::{
    parse_stackwalk, Collected, FrameStore, StackIndex, StackJoiner, STACKWALK_GUID,
};
use etwkit::etl::{EtlFile, Order};

#[test]
fn stackwalk_events_attach_to_their_events() {
    let Some(path) = common::sample(
        "perfview_net.4.5.2.x64.etl",
        "stackwalk_events_attach_to_their_events",
    ) else {
        return;
    };
    let file = EtlFile::open(path).unwrap();
    let mut index = StackIndex::new();
    let mut stackwalk_records = 0;
    file.for_each(Order::File, |r| {
        stackwalk_records += index.observe(&r.event) as usize;
        ControlFlow::Continue(())
    });

    let mut joiner = StackJoiner::new(i64::MAX);
    let mut ready = Vec::new();
    let mut from_index = Vec::new();
    let mut first_sample = None;
    let (mut walked, mut walked_frames) = (0usize, 0usize);
    file.for_each(Order::Time, |r| {
        let ev = &r.event;
        if !(ev.provider == STACKWALK_GUID && ev.header_type.is_kernel()) {
            let st = index.stack_for(ev).map(|s| s.addresses);
            if let Some(s) = &st {
                walked += 1;
                walked_frames += s.len();
            }
            // SampledProfile (PERFINFO 0x0F2E): IP, then the sampled thread.
            if first_sample.is_none()
                && ev.hook_id == Some(0x0F2E)
                && ev.cpu == 3
                && ev.payload.get(..8) == Some(&0xffff_ffff_ffd0_3003u64.to_le_bytes()[..])
            {
                first_sample = Some((
                    ev.cpu,
                    u32::from_le_bytes(ev.payload[8..12].try_into().unwrap()),
                    st.clone(),
                    index.owner_at(ev.raw_timestamp),
                ));
            }
            // What the joiner must give: the record's own stack item, kernel StackWalk frames appended.
            let combined = match (ev.stack().map(|s| s.addresses), st) {
                (Some(mut own), Some(w)) => {
                    own.extend(w);
                    Some(own)
                }
                (own, w) => own.or(w),
            };
            from_index.push(combined);
        }
        joiner.push(ev.to_owned_record(), &mut ready);
        ControlFlow::Continue(())
    });
    joiner.finish(&mut ready);

    let with_stack = from_index.iter().filter(|s| s.is_some()).count();
    let frames: usize = from_index.iter().flatten().map(|s| s.len()).sum();
    eprintln!(
        "{stackwalk_records} StackWalk records, {} stack events, {} keys; {with_stack} events with stacks, {frames} frames",
        index.stackwalk_events(),
        index.keys_defined()
    );
    assert!(parse_stackwalk(&ready[0].0).is_none());
    // The sample at 29.956 ms in the TraceEvent baseline: CPU 3, "PID=3988; TID=3780", and its stack
    // starts at the sampled instruction pointer.
    let (cpu, thread, stack, owner) = first_sample.unwrap();
    assert_eq!((cpu, thread, owner), (3, 3780, Some((3988, 3780))));
    let stack = stack.unwrap();
    assert_eq!(stack[0], 0xffff_ffff_ffd0_3003);
    assert!(stack.len() > 1);
    // Every stack resolved fully: no key reference left without a definition.
    assert_eq!(from_index.len(), ready.len());
    // The streaming join (time order, keys defined so far) agrees with the pre-scan index.
    let streamed: Vec<Option<Vec<u64>>> = ready
        .into_iter()
        .map(|(_, s)| s.map(|s| s.addresses))
        .collect();
    let differ = streamed
        .iter()
        .zip(&from_index)
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(
        differ, 0,
        "the streaming join differs from the index on {differ} events"
    );
    assert_eq!(
        (
            stackwalk_records,
            index.stackwalk_events(),
            index.keys_defined()
        ),
        (12_280, 9_359, 1_012)
    );
    // Kernel StackWalk stacks attached; with the events' own stack items added. SampledProfile
    // records match the stack of their payload's thread: 39 samples (idle ones, thread 0) no
    // longer take the lone stack another CPU's thread left at the same tick, and 12 whose tick
    // has several threads' stacks get theirs (27 fewer than the 7,853 and 8,508 matched on the
    // timestamp alone). A key reference means what the key stood for when it was logged: 1,909
    // KeyDelete records name the frames of keys later reused, which the rundown at the end does
    // not (166,258 and 195,469 frames when references took the rundown's).
    assert_eq!((walked, walked_frames), (7_826, 203_696));
    assert_eq!((with_stack, frames), (8_481, 232_907));
}

#[test]
fn decoder_for_file_exposes_stacks() {
    let Some(path) = common::sample(
        "perfview_net.4.5.2.x64.etl",
        "decoder_for_file_exposes_stacks",
    ) else {
        return;
    };
    let file = EtlFile::open(path).unwrap();
    let (dec, learned) = etwkit::decode::Decoder::for_file(etwkit::schema::Registry::new(), &file);
    assert_eq!(
        (
            learned.event_infos,
            learned.map_infos,
            learned.eventsource_manifests
        ),
        (61, 24, 3)
    );
    let (mut with_stack, mut total) = (0, 0);
    let mut sample_json = None;
    file.for_each(Order::Time, |r| {
        let d = dec.decode(&r.event);
        total += 1;
        with_stack += d.stack.is_some() as usize;
        if sample_json.is_none()
            && r.event.hook_id == Some(0x0F2E)
            && r.event.cpu == 3
            && r.event.payload.get(..8) == Some(&0xffff_ffff_ffd0_3003u64.to_le_bytes()[..])
        {
            sample_json = Some(serde_json::to_value(&d).unwrap());
        }
        ControlFlow::Continue(())
    });
    assert_eq!(with_stack, 8_481);
    let j = sample_json.unwrap();
    assert_eq!(j["stack"]["addresses"][0], 0xffff_ffff_ffd0_3003u64);
    assert!(total > 179_000);
}

#[test]
fn index_built_from_collected_buffers_equals_the_observed_index_on_every_sample() {
    let Some(files) = common::all_samples(
        "index_built_from_collected_buffers_equals_the_observed_index_on_every_sample",
    ) else {
        return;
    };
    let mut stacks_seen = 0;
    for path in files {
        let file = EtlFile::open(&path).unwrap();
        // One index observing every record in file order; one built from each buffer's
        // StackWalk events, collected on their own (as the pre-scan does on every core).
        let mut observed = StackIndex::new();
        let mut collected: Vec<Collected> = Vec::new();
        let frames = FrameStore::new();
        let mut last_buffer = usize::MAX;
        file.for_each(Order::File, |r| {
            observed.observe(&r.event);
            if r.buffer_index != last_buffer {
                collected.push(Collected::default());
                last_buffer = r.buffer_index;
            }
            collected.last_mut().unwrap().observe(&r.event, &frames);
            ControlFlow::Continue(())
        });
        let built = StackIndex::from_collected(collected, frames);
        assert_eq!(
            (built.stackwalk_events(), built.keys_defined()),
            (observed.stackwalk_events(), observed.keys_defined()),
            "{}",
            path.display()
        );
        // Every record asked for in time order with one moving hint, as a dump thread does.
        let mut hint = 0;
        let mut differ = 0;
        file.for_each(Order::Time, |r| {
            let want = observed.stack_for(&r.event);
            let mut got = Vec::new();
            let found = built.stack_into(&r.event, &mut hint, &mut got);
            stacks_seen += found as usize;
            if want.map(|s| s.addresses) != found.then_some(got)
                || built.owner_at(r.event.raw_timestamp) != observed.owner_at(r.event.raw_timestamp)
            {
                differ += 1;
            }
            ControlFlow::Continue(())
        });
        assert_eq!(differ, 0, "{}: {differ} records differ", path.display());
    }
    // The samples with kernel stacks (perfview_net.4.5.2.x64, 4.5.x86) have thousands.
    assert!(stacks_seen > 20_000, "{stacks_seen}");
}
