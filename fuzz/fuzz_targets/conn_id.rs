//! Conn id parsing and signature checks never panic; only issued ids verify in signed mode.
#![no_main]
use internal::config::IdMode;
use internal::hopper::ConnIds;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let client = ConnIds::new(IdMode::Client, Vec::new());
    if let Ok(id) = client.parse(data) {
        assert!(id.len() <= 128 && id.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    }
    let signed = ConnIds::new(IdMode::Signed, vec![b"fuzz-key".to_vec()]);
    let _ = signed.parse(data);
    let issued = signed.issue();
    assert!(signed.parse(issued.as_bytes()).is_ok());
});
