// #[wire_codec]'s module and signatures.

#[jitccl_macros::wire_codec]
mod no_decode {
    pub fn encode(value: f32) -> u8 {
        value as u8
    }
}

#[jitccl_macros::wire_codec(block = 64)]
mod block_without_scale {
    pub fn encode(value: f32, scale: f32) -> u8 {
        (value / scale) as u8
    }
    pub fn decode(code: u8, scale: f32) -> f32 {
        code as f32 * scale
    }
}

#[jitccl_macros::wire_codec]
mod scale_without_block {
    pub fn scale(amax: f32) -> f32 {
        amax
    }
    pub fn encode(value: f32) -> u8 {
        value as u8
    }
    pub fn decode(code: u8) -> f32 {
        code as f32
    }
}

#[jitccl_macros::wire_codec(block = 100)]
mod odd_block {
    pub fn encode(value: f32) -> u8 {
        value as u8
    }
}

#[jitccl_macros::wire_codec]
mod wide_code {
    pub fn encode(value: f32) -> u32 {
        value as u32
    }
    pub fn decode(code: u32) -> f32 {
        code as f32
    }
}

#[jitccl_macros::wire_codec]
mod unscaled_takes_no_scale {
    pub fn encode(value: f32, scale: f32) -> u8 {
        (value / scale) as u8
    }
    pub fn decode(code: u8) -> f32 {
        code as f32
    }
}

#[jitccl_macros::wire_codec]
mod stray_item {
    const K: f32 = 2.0;
    pub fn encode(value: f32) -> u8 {
        (value * K) as u8
    }
    pub fn decode(code: u8) -> f32 {
        code as f32 / K
    }
}

#[jitccl_macros::wire_codec]
mod stray_function {
    pub fn encode(value: f32) -> u8 {
        value as u8
    }
    pub fn decode(code: u8) -> f32 {
        code as f32
    }
    pub fn helper(x: f32) -> f32 {
        x
    }
}

#[jitccl_macros::wire_codec(name = "not a name")]
mod bad_name {
    pub fn encode(value: f32) -> u8 {
        value as u8
    }
    pub fn decode(code: u8) -> f32 {
        code as f32
    }
}

#[jitccl_macros::wire_codec]
fn not_a_module(value: f32) -> u8 {
    value as u8
}

fn main() {}
