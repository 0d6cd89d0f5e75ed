//! GPU model names. NVIDIA's GPU feature discovery labels a node with the
//! product as the driver reports it (`nvidia.com/gpu.product:
//! NVIDIA-H100-80GB-HBM3`); policies and pods name models as people do
//! (`tessera.io/gpu-models: "A100,H100"`). A product becomes a model name
//! by, first, the configured aliases (`kube.gpu_models`, exact product →
//! name), else this rule: split on `-`, `_` and spaces; drop the brand
//! words (NVIDIA, Tesla, GeForce, Quadro); the model is the first word with
//! a digit in it, upper-cased, and a bare number keeps the word before it
//! (`GeForce-RTX-3090` → `RTX3090`). So `NVIDIA-A100-SXM4-40GB` → `A100`,
//! `Tesla-V100-SXM2-16GB` → `V100`, `NVIDIA-L40S` → `L40S`,
//! `NVIDIA-RTX-A6000` → `A6000`. A name that is already short (`H100`,
//! the traces' `V100M32`) stays as it is. The `tessera.io/gpu-model` label
//! on a node is taken as written.

use std::collections::BTreeMap;

/// Words of a product string that name the vendor or the product line,
/// not the model.
const BRANDS: &[&str] = &["NVIDIA", "TESLA", "GEFORCE", "QUADRO"];

/// How product strings become model names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelNames {
    /// Exact product → model name, before the rule.
    pub aliases: BTreeMap<String, String>,
}

impl ModelNames {
    /// With `aliases` (exact product → name).
    pub fn new(aliases: BTreeMap<String, String>) -> Self {
        Self { aliases }
    }

    /// The model name of `product`.
    pub fn name(&self, product: &str) -> String {
        if let Some(a) = self.aliases.get(product) {
            return a.clone();
        }
        normalise(product)
    }
}

/// The rule alone (no aliases).
pub fn normalise(product: &str) -> String {
    let words: Vec<String> = product
        .split(['-', '_', ' '])
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .filter(|w| !BRANDS.contains(&w.as_str()))
        .collect();
    match words.iter().position(|w| w.chars().any(|c| c.is_ascii_digit())) {
        Some(i) if words[i].chars().all(|c| c.is_ascii_digit()) && i > 0 => format!("{}{}", words[i - 1], words[i]),
        Some(i) => words[i].clone(),
        // No word with a digit: what is left, as written.
        None => product.trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_feature_discovery_products_become_model_names() {
        for (product, model) in [
            ("NVIDIA-H100-80GB-HBM3", "H100"),
            ("NVIDIA-A100-SXM4-40GB", "A100"),
            ("NVIDIA-A100-PCIE-80GB", "A100"),
            ("Tesla-V100-SXM2-16GB", "V100"),
            ("Tesla-T4", "T4"),
            ("NVIDIA-L40S", "L40S"),
            ("NVIDIA-A10G", "A10G"),
            ("NVIDIA-H100-NVL", "H100"),
            ("NVIDIA-GeForce-RTX-3090", "RTX3090"),
            ("NVIDIA-RTX-A6000", "A6000"),
            ("H100", "H100"),
            ("V100M32", "V100M32"),
            ("a100", "A100"),
        ] {
            assert_eq!(normalise(product), model, "{product}");
        }
        let names = ModelNames::new([("NVIDIA-A100-SXM4-80GB".to_string(), "A100-80GB".to_string())].into());
        assert_eq!(names.name("NVIDIA-A100-SXM4-80GB"), "A100-80GB", "an alias wins");
        assert_eq!(names.name("NVIDIA-A100-SXM4-40GB"), "A100");
    }
}
