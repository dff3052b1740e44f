//! Agent definition files (`configs/custom/<id>.yaml`, `configs/<profile>.yaml`): the YAML
//! reader and `definition::validate`.
//!
//! Checks, for any input:
//! - reading and validating never panic, whatever id the file is loaded under;
//! - a refused definition says why (a message, and field violations for field errors);
//! - a definition that validates survives what the registry does with it: written back with
//!   `to_yaml` it reads back equal and still valid, and served as an `AgentSpec` and sent back
//!   (GET, then PUT) it is still valid and keeps its fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry_svc::{
    convert::{custom_to_proto, spec_to_file},
    definition::{self, CustomAgentFile, ProfileFile},
};
use taskforce_proto::{error::ErrorKind, v1};

fuzz_target!(|data: &[u8]| {
    // Profiles are read with the same YAML reader but never validated: only "no panic".
    if let Ok(profile) = serde_yaml::from_slice::<ProfileFile>(data) {
        let _ = registry_svc::convert::profile_to_proto("fuzz", String::new(), &profile);
    }
    let Ok(def) = serde_yaml::from_slice::<CustomAgentFile>(data) else {
        return;
    };
    let mut ids = vec!["fuzz-agent".to_owned()];
    ids.extend(def.agent_id.clone());
    ids.extend(def.subagents.first().cloned());
    for id in &ids {
        match definition::validate(id, &def) {
            Ok(()) => valid_definition_round_trips(id, &def),
            Err(e) => {
                assert!(!e.message.is_empty(), "a refusal without a message: {e:?}");
                if e.kind == ErrorKind::InvalidArgument {
                    assert!(!e.field_violations.is_empty(), "no field named: {e:?}");
                }
            }
        }
    }
});

fn valid_definition_round_trips(id: &str, def: &CustomAgentFile) {
    let yaml = definition::to_yaml(def).expect("a valid definition serializes");
    let back: CustomAgentFile = serde_yaml::from_str(&yaml)
        .unwrap_or_else(|e| panic!("to_yaml wrote YAML that does not read back ({e}):\n{yaml}"));
    assert_eq!(&back, def, "to_yaml changed the definition:\n{yaml}");
    definition::validate(id, &back).expect("the written definition is still valid");

    let agent = custom_to_proto(id, "v1".to_owned(), def);
    let Some(v1::agent::Kind::Custom(custom)) = agent.kind else {
        panic!("a custom definition served as another kind");
    };
    let spec = custom.spec.expect("a custom agent has a spec");
    let resent = spec_to_file(spec);
    if let Err(e) = definition::validate(id, &resent) {
        panic!("a served definition is refused when sent back: {e:?}\nserved from {def:?}");
    }
    assert_eq!(resent.name, def.name);
    assert_eq!(resent.description, def.description);
    assert_eq!(resent.prompt, def.prompt);
    assert_eq!(resent.tools, def.tools);
    assert_eq!(resent.subagents, def.subagents);
    assert_eq!(resent.model, def.model);
    assert_eq!(resent.mcp_servers, def.mcp_servers);
}
