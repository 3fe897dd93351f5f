//! The design doc's scenarios 1 to 7, as the fleet files shipped in
//! `examples/fleets/`.

use super::fleet::Fleet;
use super::UnknownScenario;

/// The fleet files, scenario 1 first.
const FILES: [&str; 7] = [
    include_str!("../examples/fleets/scenario-1.yaml"),
    include_str!("../examples/fleets/scenario-2.yaml"),
    include_str!("../examples/fleets/scenario-3.yaml"),
    include_str!("../examples/fleets/scenario-4.yaml"),
    include_str!("../examples/fleets/scenario-5.yaml"),
    include_str!("../examples/fleets/scenario-6.yaml"),
    include_str!("../examples/fleets/scenario-7.yaml"),
];

/// Scenario `n`'s fleet.
pub(super) fn fleet(n: u32) -> Result<Fleet, UnknownScenario> {
    let text = (n as usize)
        .checked_sub(1)
        .and_then(|i| FILES.get(i))
        .ok_or(UnknownScenario(n))?;
    Ok(Fleet::from_yaml(text).expect("the shipped scenarios are valid fleets"))
}
