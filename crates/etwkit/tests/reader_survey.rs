//! Every sample file: `stats` agrees with the independent walker's survey (peers/survey.json) on
//! records, header types, events lost and pointer size; nothing is bad.

mod common;

use etwkit::etl::{stats::file_stats, EtlFile};

#[test]
fn stats_match_survey_for_every_sample() {
    let Some(dir) = common::samples_dir("stats_match_survey_for_every_sample") else {
        return;
    };
    let survey: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("peers/survey.json")).expect("survey.json"))
            .unwrap();
    let entries = survey.as_array().unwrap();
    let files = common::all_samples("stats_match_survey_for_every_sample").unwrap();
    assert_eq!(files.len(), entries.len(), "one survey entry per sample");
    let mut total = 0u64;
    for e in entries {
        let name = e["file"].as_str().unwrap();
        let f = EtlFile::open(dir.join(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
        let s = file_stats(&f);
        assert_eq!(s.records, e["records"].as_u64().unwrap(), "{name}: records");
        let want: std::collections::BTreeMap<String, u64> =
            serde_json::from_value(e["header_types"].clone()).unwrap();
        assert_eq!(s.header_types, want, "{name}: header_types");
        assert_eq!(
            s.events_lost as u64,
            e["logfile"]["events_lost"].as_u64().unwrap(),
            "{name}: events_lost"
        );
        assert_eq!(
            s.pointer_size as u64,
            e["logfile"]["pointer_size"].as_u64().unwrap(),
            "{name}: pointer_size"
        );
        assert_eq!(s.buffers, e["buffers"].as_u64().unwrap(), "{name}: buffers");
        assert_eq!(s.bad_buffers, 0, "{name}: bad buffers {:?}", s.issues);
        assert_eq!(s.bad_records, 0, "{name}: bad records {:?}", s.issues);
        assert!(s.issues.is_empty(), "{name}: {:?}", s.issues);
        // Providers: the survey lists non-kernel providers (classic ones marked "(classic)").
        let provs = e["providers"].as_object().unwrap();
        for (k, v) in provs {
            let guid = k.split(' ').next().unwrap();
            assert_eq!(
                s.providers.get(guid).copied(),
                v.as_u64(),
                "{name}: provider {guid}"
            );
        }
        total += s.records;
    }
    assert_eq!(total, 461_603, "all samples together");
}
